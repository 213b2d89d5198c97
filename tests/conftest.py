"""Shared fixtures. The real-sshd fixtures live in tests/sshd.py."""

from tests.sshd import ssh_host, sshd

__all__ = ["ssh_host", "sshd"]
