"""Where jobs run: the executor contract on this machine, a real sshd and a real Slurm,
ssh_config and host keys, shipping the package, and secrets kept out of argv and other
users' view."""
