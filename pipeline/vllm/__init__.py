"""Talking to vLLM: its server and metrics, the OpenAI-compatible client, the
probe that asks a host's vLLM what it accepts, and the model files it is given.
"""
