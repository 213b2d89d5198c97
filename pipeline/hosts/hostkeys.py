"""Host keys, checked on every hop: which known_hosts files apply, and what an unknown key does.

paramiko's client (and so fabric's ``Connection``) starts with ``AutoAddPolicy`` and no
known_hosts loaded: any key is taken, a *wrong* key in ``~/.ssh/known_hosts`` included. The
hops fabric builds for an ssh_config ``ProxyJump`` are such clients too, and fabric ignores
``StrictHostKeyChecking`` and ``UserKnownHostsFile``. So every client the harness opens, the
target and each hop, gets :func:`secure` before it connects:

- ``check`` (the default): the key must be in a known_hosts file; unknown or changed, the
  connection is refused with one line saying which and what to do.
- ``accept-new``: a key seen for the first time is appended to one named file, as OpenSSH's
  ``StrictHostKeyChecking accept-new`` does; a changed key is still refused. paramiko's own
  way (``load_host_keys`` + ``AutoAddPolicy``) would rewrite the whole loaded file, the
  user's ``~/.ssh/known_hosts`` among them, so this policy appends one line itself.
- insecure (``insecure_host_key: true``, the target only): any key, nothing remembered.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

import paramiko

__all__ = ["AcceptNew", "UnknownHostKey", "changed_key_message", "default_known_hosts",
           "secure"]


def default_known_hosts() -> str:
    return os.path.expanduser("~/.ssh/known_hosts")


class UnknownHostKey(paramiko.SSHException):
    """A host showed a key no known_hosts file has, and nothing allows taking it."""

    def __init__(self, hostname: str, key: paramiko.PKey, files: Sequence[str]):
        self.hostname = hostname
        self.key = key
        self.files = list(files)
        super().__init__(f"{hostname} ({key.get_name()} {key.fingerprint}) is not in "
                         f"{', '.join(self.files) or 'any known_hosts file'}")


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, files: Sequence[str]):
        self.files = list(files)

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise UnknownHostKey(hostname, key, self.files)


class AcceptNew(paramiko.MissingHostKeyPolicy):
    """Take a first-seen key and append it to ``record_into`` (created if missing)."""

    def __init__(self, record_into: str):
        self.record_into = record_into

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        path = Path(self.record_into)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        # Two runners may meet the same new host at once: one line each, never interleaved.
        with open(path, "a", encoding="ascii") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)


def secure(client: paramiko.SSHClient, files: Sequence[str], *, accept_new: str | None = None,
           insecure: bool = False) -> None:
    """Load every existing file of ``files`` into ``client`` (in memory only) and set what an
    unknown key does: refused, recorded into ``accept_new``, or (``insecure``) taken."""
    if insecure:
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        return
    for name in files:
        if os.path.exists(name):
            client.get_host_keys().load(name)
    client.set_missing_host_key_policy(AcceptNew(accept_new) if accept_new
                                       else _RejectUnknown(files))


def changed_key_message(exc: paramiko.BadHostKeyException, name: str,
                        files: Sequence[str]) -> str:
    """One line: the host, the key known_hosts has, the key the host offered, what to do."""
    where = " or ".join(files) or "known_hosts"
    return (f"host key for {name} changed (it does not match {where}): known "
            f"{exc.expected_key.get_name()} {exc.expected_key.fingerprint}, offered "
            f"{exc.key.get_name()} {exc.key.fingerprint}; if the host was rebuilt, remove "
            f"the old line (ssh-keygen -R '{name}' -f "
            f"{files[0] if files else '~/.ssh/known_hosts'}), or set insecure_host_key: true")
