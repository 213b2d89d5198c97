"""The executor for an SSH host, through fabric's ``Connection`` (paramiko underneath).

How the connection is built (the user's ssh_config, the entry's overrides, a ``gateway``
entry or ``ProxyJump`` hops, host keys on every hop) is :mod:`pipeline.hosts.ssh_config` and
:mod:`pipeline.hosts.hostkeys`. Files go over SFTP; a host that refuses SFTP gets them over exec
channels instead (:mod:`pipeline.hosts.transfer`, sha256 checked on both ends), and the run's
output says so once. The home directory is always found over an exec channel.

fabric never sees an ``env=``: it would paste values into the command unquoted, and a
command line is readable by every user of the host (``ps``). The environment travels as
quoted ``export`` lines on the channel's standard input (:meth:`SSHExecutor._shell_input`),
which the remote shell evaluates before its script; so a job's secrets are in no argv on
the host, and in no file.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TypeVar

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut, ThreadException

from pipeline.errors import CommandTimeout, ExecutorError, HostUnreachable
from pipeline.hosts import transfer
from pipeline.hosts.executor import Executor, Result
from pipeline.hosts.hostkeys import UnknownHostKey, changed_key_message
from pipeline.hosts.ssh_config import Route, make_route
from pipeline.spec.models import HostSpec

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


_HOME_MARK = "HARNESS_HOME="


class SSHExecutor(Executor):
    """Runs commands and jobs on ``host`` over one SSH connection, reopened when it drops."""

    def __init__(self, host: HostSpec, *, hosts: Mapping[str, HostSpec] | None = None,
                 notify: Callable[[str], None] | None = None, reconnect_budget: float = 60.0):
        if not host.is_ssh:
            raise ExecutorError(f"{host.name} is not an SSH host (no `host:`)")
        super().__init__(host, notify=notify)
        self._hosts = dict(hosts or {})
        #: How long poll/tail/cancel/start_detached keep reconnecting after a drop.
        self.reconnect_budget = reconnect_budget
        self._conn: Connection | None = None
        self._route: Route | None = None
        self._home: str | None = None
        self._ever_connected = False
        #: None until first asked; False once the host has refused SFTP (it will not change
        #: its mind while we run, so it is not asked again after a reconnect).
        self.has_sftp: bool | None = None

    # --- connection ----------------------------------------------------------------------

    def _connection(self) -> Connection:
        """The open connection, opening (or reopening after a drop) as needed."""
        if self._conn is not None and self._conn.is_connected:
            return self._conn
        self._drop()
        route = make_route(self.host, self._hosts)
        conn = route.conn
        try:
            conn.open()
        except Exception as exc:
            _close(conn)
            raise _unreachable(exc, self.host, self._hosts, route) from None
        if conn.transport is not None:
            # Notice a silently dead network within a minute instead of hanging on it.
            conn.transport.set_keepalive(15)
        self._conn, self._route = conn, route
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
        """The login directory, from ``pwd`` on an exec channel (the shell starts there):
        what SFTP's ``normalize('.')`` said, on hosts with or without SFTP."""
        if self._home is None:
            code, out, err = self.with_reconnect(
                lambda: self._shell(f"printf '\\n{_HOME_MARK}%s\\n' \"$(pwd -P)\"", 60))
            found = [ln[len(_HOME_MARK):] for ln in out.splitlines()
                     if ln.startswith(_HOME_MARK)]
            if code != 0 or not found or not found[-1].startswith("/"):
                raise ExecutorError(f"cannot find the home directory: exit {code}: "
                                    f"{' '.join((err or out).split())[:200]}",
                                    where=self.host.name)
            self._home = found[-1]
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

    def _shell_input(self, script: str, data: bytes,
                     timeout: float | None) -> tuple[int, str, str]:
        """A raw exec channel, not fabric's ``in_stream``: that sends one byte per loop."""
        conn = self._connection()
        try:
            r = transfer.exec_with_input(conn.client.get_transport(), script, data,
                                         timeout=math.ceil(timeout) if timeout else None)
        except transfer.ExecTimeout as exc:
            raise CommandTimeout(f"no answer from {self.host.label} in {timeout:g}s",
                                 where=self.host.name,
                                 result=Result("(harness script)", -1, _text(exc.output.stdout),
                                               _text(exc.output.stderr))) from None
        except _DROPS as exc:
            if _still_up(conn):
                raise ExecutorError(f"ssh command failed: {exc}", where=self.host.name) from None
            raise self._lost(exc) from None
        if r.code == -1 and not _still_up(conn):
            raise self._lost(EOFError("channel closed without an exit status"))
        return r.code, _text(r.stdout), _text(r.stderr)

    def _sftp(self, conn: Connection) -> paramiko.SFTPClient | None:
        """The connection's SFTP client, or None on a host that refuses SFTP."""
        if self.has_sftp is False:
            return None
        try:
            client = conn.sftp()
        except _DROPS as exc:
            if not _still_up(conn):
                raise self._lost(exc) from None
            self.has_sftp = False
            self.note(f"{self.host.label} offers no SFTP ({' '.join(str(exc).split())}): "
                      "files go over exec channels (cat), sha256 checked on both ends")
            return None
        self.has_sftp = True
        return client

    def _transfer(self, conn: Connection, what: str, fn: Callable[[paramiko.Transport], T]
                  ) -> T:
        """Run an exec-channel transfer; a dead link is a lost connection, anything else
        an ExecutorError naming ``what``."""
        try:
            return fn(conn.client.get_transport())
        except FileNotFoundError:
            raise
        except transfer.TransferError as exc:
            if not _still_up(conn):
                raise self._lost(exc) from None
            raise ExecutorError(f"{what}: {exc}", where=self.host.name) from None
        except _DROPS as exc:
            if _still_up(conn):
                raise ExecutorError(f"{what}: {exc}", where=self.host.name) from None
            raise self._lost(exc) from None

    def _read(self, path: str, offset: int, limit: int) -> bytes:
        conn = self._connection()
        sftp = self._sftp(conn)
        if sftp is None:
            return self._transfer(conn, f"cannot read {path}",
                                  lambda t: transfer.read_range(t, path, offset, limit))
        try:
            with sftp.open(path, "rb") as fh:
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
        conn = self._connection()
        if self._sftp(conn) is None:
            self._transfer(conn, f"cannot put {local} to {target}",
                           lambda t: transfer.put_file(t, local, target))
            return target
        self.run(["mkdir", "-p", str(PurePosixPath(target).parent)], cwd="/")
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
        if self._sftp(conn) is None:
            try:
                self._transfer(conn, f"cannot get {source}",
                               lambda t: transfer.get_file(t, source, local))
            except FileNotFoundError:
                raise ExecutorError(f"cannot get {source}: no such file",
                                    where=self.host.name) from None
            return Path(local)
        try:
            conn.get(source, str(local))
        except _DROPS as exc:
            if _still_up(conn):
                raise ExecutorError(f"cannot get {source}: {exc}", where=self.host.name) from None
            raise self._lost(exc) from None
        return Path(local)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _close(conn: Connection) -> None:
    try:
        conn.close()
        if isinstance(conn.gateway, Connection):
            _close(conn.gateway)
    except Exception:  # closing a dead connection may itself fail; nothing to do about it
        pass


def _unreachable(exc: BaseException, spec: HostSpec, hosts: Mapping[str, HostSpec],
                 route: Route | None = None) -> HostUnreachable:
    """One line saying why ``spec`` cannot be reached, and whether waiting could help."""
    if isinstance(exc, HostUnreachable):
        return exc
    via = f" via {hosts[spec.gateway].label}" if spec.gateway in hosts else \
        (route.via if route else "")
    head = f"cannot connect to {spec.label}{via}"
    retryable = True
    if isinstance(exc, paramiko.BadHostKeyException):
        hop = route.hop_for(exc.hostname) if route else None
        name = hop.name if hop else exc.hostname
        reason = changed_key_message(exc, name, hop.files if hop else [])
        retryable = False
    elif isinstance(exc, UnknownHostKey):
        hop = route.hop_for(exc.hostname.strip("[").split("]")[0]) if route else None
        port = hop.conn.port if hop else 22
        host = hop.conn.host if hop else exc.hostname
        reason = (f"host key unknown: {exc}; add it (ssh-keyscan -p {port} {host} >> "
                  f"{exc.files[0] if exc.files else '~/.ssh/known_hosts'}), set "
                  f"host_key: accept-new to record it on first use, or set "
                  f"insecure_host_key: true")
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
