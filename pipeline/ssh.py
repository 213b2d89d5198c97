"""The executor for an SSH host, through fabric's ``Connection`` (paramiko underneath).

Key auth with the host entry's ``key``; host keys checked against ``known_hosts`` with a
reject policy unless the entry says ``insecure_host_key: true``; a jump host through
``gateway`` (another SSH entry, opened as a ProxyJump-style direct-tcpip channel); fabric
still reads ``~/.ssh/config``, so aliases and ProxyJump written there keep working.

fabric never sees an ``env=``: it would paste values into the command unquoted. The
environment travels as quoted ``export`` lines built by :class:`pipeline.executor.Executor`.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TypeVar

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut, ThreadException

from pipeline.errors import CommandTimeout, ExecutorError, HostUnreachable
from pipeline.executor import Executor, Result
from pipeline.spec import HostSpec

__all__ = ["SSHExecutor"]

T = TypeVar("T")
# What a dead or dying connection raises from paramiko, fabric and the socket underneath.
_DROPS = (paramiko.SSHException, EOFError, OSError, ThreadException)


def _still_up(conn: Connection) -> bool:
    """Is the link really alive after a failure on it? Right after the server goes away,
    paramiko may still call the transport active for a moment: prod it, give its reader a
    moment to notice, then ask. A drop taken for a command error would not be retried."""
    transport = conn.transport
    if transport is None or not transport.is_active():
        return False
    try:
        transport.send_ignore()
    except _DROPS:
        return False
    time.sleep(0.1)
    return transport.is_active()


class _UnknownHostKey(paramiko.SSHException):
    pass


class _RejectUnknown(paramiko.RejectPolicy):
    """RejectPolicy, but with an error we can tell apart from other SSH failures."""

    def __init__(self, known_hosts: str):
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise _UnknownHostKey(f"{hostname} is not in {self.known_hosts}")


class SSHExecutor(Executor):
    """Runs commands and jobs on ``host`` over one SSH connection, reopened when it drops."""

    def __init__(self, host: HostSpec, *, hosts: Mapping[str, HostSpec] | None = None,
                 reconnect_budget: float = 60.0):
        if not host.is_ssh:
            raise ExecutorError(f"{host.name} is not an SSH host (no `host:`)")
        super().__init__(host)
        self._hosts = dict(hosts or {})
        #: How long poll/tail/cancel/start_detached keep reconnecting after a drop.
        self.reconnect_budget = reconnect_budget
        self._conn: Connection | None = None
        self._home: str | None = None
        self._ever_connected = False

    # --- connection ----------------------------------------------------------------------

    def _connection(self) -> Connection:
        """The open connection, opening (or reopening after a drop) as needed."""
        if self._conn is not None and self._conn.is_connected:
            return self._conn
        self._drop()
        conn = _make_connection(self.host, self._hosts, [])
        try:
            conn.open()
        except Exception as exc:
            _close(conn)
            raise _unreachable(exc, self.host, self._hosts) from None
        if conn.transport is not None:
            # Notice a silently dead network within a minute instead of hanging on it.
            conn.transport.set_keepalive(15)
        self._conn = conn
        self._ever_connected = True
        return conn

    def _drop(self) -> None:
        if self._conn is not None:
            _close(self._conn)
            self._conn = None

    def close(self) -> None:
        self._drop()

    def with_reconnect(self, fn: Callable[[], T]) -> T:
        """Run an idempotent ``fn``, reconnecting with backoff while the host is away.

        Backoff doubles from 0.25 s to 5 s within ``reconnect_budget`` seconds. Only a
        connection that once worked is waited for: a host that was never reached fails at
        once (exit 3), and so do a bad host key or refused credentials, which waiting will
        not fix.
        """
        delay = 0.25
        deadline = time.monotonic() + self.reconnect_budget
        while True:
            try:
                self._connection()
                return fn()
            except HostUnreachable as exc:
                if not (exc.retryable and self._ever_connected):
                    raise
                last = exc
            self._drop()
            if time.monotonic() + delay > deadline:
                raise HostUnreachable(f"{last.message}; gave up reconnecting after "
                                      f"{self.reconnect_budget:g}s", where=self.host.name)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _lost(self, exc: BaseException) -> HostUnreachable:
        self._drop()
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return HostUnreachable(f"connection to {self.host.label} lost: {reason}",
                               where=self.host.name)

    # --- transport -----------------------------------------------------------------------

    def home(self) -> str:
        if self._home is None:
            def ask() -> str:
                try:
                    return self._connection().sftp().normalize(".")
                except _DROPS as exc:
                    if self._conn is not None and _still_up(self._conn):
                        raise ExecutorError(f"cannot find the home directory: {exc}",
                                            where=self.host.name) from None
                    raise self._lost(exc) from None
            self._home = self.with_reconnect(ask)
        return self._home

    def _shell(self, script: str, timeout: float | None) -> tuple[int, str, str]:
        conn = self._connection()
        try:
            r = conn.run(script, hide=True, warn=True, in_stream=False, pty=False,
                         timeout=math.ceil(timeout) if timeout else None)
        except CommandTimedOut as exc:
            raise CommandTimeout(f"no answer from {self.host.label} in {timeout:g}s",
                                 where=self.host.name,
                                 result=Result("(harness script)", -1, exc.result.stdout,
                                               exc.result.stderr)) from None
        except _DROPS as exc:
            if _still_up(conn):
                raise ExecutorError(f"ssh command failed: {exc}", where=self.host.name) from None
            raise self._lost(exc) from None
        # paramiko reports -1 when the channel closed without an exit status: a dropped link.
        if r.exited == -1 and not _still_up(conn):
            raise self._lost(EOFError("channel closed without an exit status"))
        return r.exited, r.stdout, r.stderr

    def _read(self, path: str, offset: int, limit: int) -> bytes:
        conn = self._connection()
        try:
            with conn.sftp().open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read(limit)
        except FileNotFoundError:
            raise
        except _DROPS as exc:
            if _still_up(conn):
                raise ExecutorError(f"cannot read {path}: {exc}", where=self.host.name) from None
            raise self._lost(exc) from None

    def put(self, local: str | Path, remote: str) -> str:
        target = self.resolve(remote)
        self.run(["mkdir", "-p", str(PurePosixPath(target).parent)], cwd="/")
        conn = self._connection()
        try:
            conn.put(str(local), target)
        except _DROPS as exc:
            if _still_up(conn):
                raise ExecutorError(f"cannot put {local} to {target}: {exc}",
                                    where=self.host.name) from None
            raise self._lost(exc) from None
        return target

    def get(self, remote: str, local: str | Path) -> Path:
        source = self.resolve(remote)
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        conn = self._connection()
        try:
            conn.get(source, str(local))
        except _DROPS as exc:
            if _still_up(conn):
                raise ExecutorError(f"cannot get {source}: {exc}", where=self.host.name) from None
            raise self._lost(exc) from None
        return Path(local)


def _make_connection(spec: HostSpec, hosts: Mapping[str, HostSpec],
                     seen: list[str]) -> Connection:
    gateway = None
    if spec.gateway:
        if spec.gateway in seen or spec.gateway not in hosts:
            raise HostUnreachable(f"bad gateway {spec.gateway!r} for {spec.name}",
                                  where=spec.name, retryable=False)
        gateway = _make_connection(hosts[spec.gateway], hosts, [*seen, spec.name])
    timeout = max(1, math.ceil(spec.connect_timeout))
    kwargs: dict[str, object] = {"banner_timeout": timeout, "auth_timeout": timeout}
    if spec.key:
        if not os.path.isfile(spec.key):
            raise HostUnreachable(f"key file {spec.key} does not exist", where=spec.name,
                                  retryable=False)
        # Only the configured key: an agent or ~/.ssh keys would make auth depend on
        # whoever happens to run the harness.
        kwargs.update(key_filename=[spec.key], look_for_keys=False, allow_agent=False)
    conn = Connection(spec.host, user=spec.user, port=spec.port, connect_timeout=timeout,
                      connect_kwargs=kwargs, gateway=gateway)
    client = conn.client
    if spec.insecure_host_key:
        # accept whatever key the host shows, and remember nothing
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    else:
        known = spec.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        if os.path.exists(known):
            client.get_host_keys().load(known)
        elif spec.known_hosts:
            raise HostUnreachable(f"known_hosts file {known} does not exist", where=spec.name,
                                  retryable=False)
        client.set_missing_host_key_policy(_RejectUnknown(known))
    return conn


def _close(conn: Connection) -> None:
    try:
        conn.close()
        if isinstance(conn.gateway, Connection):
            _close(conn.gateway)
    except Exception:  # closing a dead connection may itself fail; nothing to do about it
        pass


def _unreachable(exc: BaseException, spec: HostSpec,
                 hosts: Mapping[str, HostSpec]) -> HostUnreachable:
    """One line saying why ``spec`` cannot be reached, and whether waiting could help."""
    if isinstance(exc, HostUnreachable):
        return exc
    via = f" via {hosts[spec.gateway].label}" if spec.gateway in hosts else ""
    head = f"cannot connect to {spec.label}{via}"
    retryable = True
    if isinstance(exc, paramiko.BadHostKeyException):
        known = spec.known_hosts or "~/.ssh/known_hosts"
        reason = (f"host key does not match {known} (got {exc.key.get_name()} "
                  f"{exc.key.fingerprint}); if the host was rebuilt, update known_hosts, "
                  f"or set insecure_host_key: true")
        retryable = False
    elif isinstance(exc, _UnknownHostKey):
        reason = (f"host key unknown: {exc}; add it (ssh-keyscan -p {spec.port} {spec.host}) "
                  f"or set insecure_host_key: true")
        retryable = False
    elif isinstance(exc, paramiko.AuthenticationException):
        key = f" with key {spec.key}" if spec.key else ""
        reason = f"authentication failed{key}: {exc}"
        retryable = False
    elif isinstance(exc, (paramiko.ssh_exception.NoValidConnectionsError,
                          ConnectionRefusedError)):
        reason = "connection refused"
    elif isinstance(exc, (socket.timeout, TimeoutError)):
        reason = f"timed out after {spec.connect_timeout:g}s"
    elif isinstance(exc, socket.gaierror):
        reason = f"cannot resolve host name {spec.host!r}"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    return HostUnreachable(f"{head}: {' '.join(reason.split())}", where=spec.name,
                           retryable=retryable)
