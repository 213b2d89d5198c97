"""Where jobs run: the executor interface and its local, SSH and Slurm
implementations, detached jobs, transfers, and the registry that names them.
"""
