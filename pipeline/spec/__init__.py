"""The pipeline spec: YAML to a typed, checked model of stages, hosts and gates.
"""
