"""Files over plain SSH exec channels, for hosts that refuse SFTP.

Some GPU rental proxies and minimal containers run sshd without a ``Subsystem sftp`` line:
``sftp()`` fails with ``Channel closed.`` while exec channels work. fabric's
``run(..., in_stream=file)`` is no way to send a file (it reads one byte a loop and decodes
it as text: about 180 B/s), so these functions drive a raw paramiko channel: ``cat > tmp``
fed with ``sendall`` and closed with ``shutdown_write``, or ``cat`` read back in large
chunks. Either way the bytes are hashed on both ends (sha256: ``sha256sum``, else
``shasum -a 256``, else ``openssl``) and a file lands under its name only when the two
hashes agree; a partial upload is never left where the real file goes. An upload is one
round trip: the local hash goes with the command, and the host keeps the file (rename) or
drops it. Throughput against SFTP: ``bench/hosts/ssh_transfer.py``, docs/PERFORMANCE.md.
"""

from __future__ import annotations

import hashlib
import os
import select
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import paramiko

__all__ = ["MISSING", "ExecOutput", "ExecTimeout", "TransferError", "exec_bytes",
           "exec_with_input", "get_file", "put_file", "read_range"]

CHUNK = 1 << 18
#: Exit code the read scripts use for "no such file".
MISSING = 44
q = shlex.quote
# Picks the host's sha256 tool once, before any stdin is read, so a pipe can feed it.
_HASH = ("if command -v sha256sum >/dev/null 2>&1; then H=sha256sum\n"
         "elif command -v shasum >/dev/null 2>&1; then H='shasum -a 256'\n"
         "elif command -v openssl >/dev/null 2>&1; then H='openssl dgst -sha256 -r'\n"
         "else echo 'no sha256 tool on the host (sha256sum, shasum or openssl)' >&2; exit 1\n"
         "fi\n")


class TransferError(Exception):
    """The bytes did not arrive whole: a checksum differed, or the remote side failed."""


@dataclass
class ExecOutput:
    code: int
    stdout: bytes
    stderr: bytes


def exec_bytes(transport: paramiko.Transport, command: str, *, source: BinaryIO | None = None,
               sink: BinaryIO | None = None, idle_timeout: float = 120.0) -> ExecOutput:
    """Run ``command`` on a fresh channel. ``source`` is sent as its stdin (then EOF);
    stdout goes to ``sink`` if given, else is returned. ``idle_timeout`` bounds a stall, not
    the transfer."""
    chan = transport.open_session()
    try:
        chan.settimeout(idle_timeout)
        chan.exec_command(command)
        if source is not None:
            try:
                while block := source.read(CHUNK):
                    chan.sendall(block)
            except OSError:
                pass  # the remote side stopped reading; its exit status says why
        chan.shutdown_write()
        out = bytearray()
        while data := chan.recv(CHUNK):
            if sink is not None:
                sink.write(data)
            else:
                out += data
        err = bytearray()
        while data := chan.recv_stderr(CHUNK):
            err += data
        return ExecOutput(chan.recv_exit_status(), bytes(out), bytes(err))
    finally:
        chan.close()


class ExecTimeout(Exception):
    """The command outlived its time limit; ``output`` holds what it had written."""

    def __init__(self, output: ExecOutput):
        super().__init__("timed out")
        self.output = output


def exec_with_input(transport: paramiko.Transport, command: str, data: bytes,
                    timeout: float | None = None) -> ExecOutput:
    """Run ``command`` on a fresh channel with ``data`` as its stdin (then EOF), reading
    stdout and stderr as they come: the channel's window is shared, so a command that
    writes much to one while the other is read to its end would stall. Raises
    :class:`ExecTimeout` (the channel closed) after ``timeout`` seconds.

    This is how a shell gets values that must not be in its command line (the job's
    environment, :class:`pipeline.hosts.jobscripts.StdinEnv`): the command is visible in the
    host's process list, the channel's data is not.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    chan = transport.open_session()
    try:
        chan.exec_command(command)
        chan.sendall(data)
        chan.shutdown_write()
        out, err = bytearray(), bytearray()
        while True:
            # the channel's fileno is readable on data, end of file and close alike
            select.select([chan], [], [], 0.05)
            while chan.recv_ready():
                out += chan.recv(CHUNK)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(CHUNK)
            if (chan.eof_received or chan.closed) and chan.exit_status_ready() \
                    and not chan.recv_ready() and not chan.recv_stderr_ready():
                return ExecOutput(chan.recv_exit_status(), bytes(out), bytes(err))
            if deadline is not None and time.monotonic() > deadline:
                raise ExecTimeout(ExecOutput(-1, bytes(out), bytes(err)))
    finally:
        chan.close()


def put_file(transport: paramiko.Transport, local: str | Path, target: str) -> str:
    """Copy ``local`` to the absolute ``target`` (parents created); return its sha256."""
    expected = _sha256(local)
    parent = str(PurePosixPath(target).parent)
    tmp = f"{target}.incoming-{os.urandom(4).hex()}"
    size = os.path.getsize(local)
    # The host hashes the stream as it writes it (tee), so hashing costs no second pass;
    # the size check catches a write that failed (a full disk) under a hash that read all.
    script = (
        _HASH
        + f"mkdir -p {q(parent)} || exit 1\n"
        + f"got=$(tee {q(tmp)} | $H)\n"
        + "got=${got%% *}\n"
        + f"n=$(wc -c < {q(tmp)} 2>/dev/null) || n=0\n"
        + f'if [ "$got" = {q(expected)} ] && [ "$n" -eq {size} ]; then '
        + f'mv -f {q(tmp)} {q(target)} && echo "$got"; '
        + f'else rm -f {q(tmp)}; echo "sha256 $got, $n bytes" >&2; exit 3; fi\n'
    )
    before = os.stat(local)
    with open(local, "rb") as fh:
        out = exec_bytes(transport, script, source=fh)
    after = os.stat(local)
    # The hash was taken before sending (the host must know it to keep or drop the file in
    # one round trip); a file changed since would have sent other bytes.
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        raise TransferError(f"{local} changed while it was being sent")
    if out.code != 0:
        raise TransferError(f"exit {out.code}: {_said(out)}"
                            + (f" (sent sha256 {expected}, {size} bytes)" if out.code == 3
                               else ""))
    return expected


def get_file(transport: paramiko.Transport, source: str, local: str | Path) -> str:
    """Copy the absolute remote ``source`` to ``local``; return its sha256. Raises
    FileNotFoundError when there is no such file."""
    script = (
        _HASH
        + f"[ -f {q(source)} ] || exit {MISSING}\n"
        # the host hashes the file while cat sends it: the two overlap, not add up
        + f'{{ got=$($H < {q(source)}) && printf "sha256 %s\\n" "${{got%% *}}" >&2; }} &\n'
        + f"cat {q(source)} || exit 1\n"
        + "wait $! || exit 1\n"
    )
    local = Path(local)
    local.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=f".{local.name}.", dir=local.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            out = exec_bytes(transport, script, sink=_HashingSink(fh, digest))
        if out.code == MISSING:
            raise FileNotFoundError(source)
        said = out.stderr.decode("utf-8", "replace").split()
        remote = said[said.index("sha256") + 1] if "sha256" in said[:-1] else None
        if out.code != 0 or remote is None:
            raise TransferError(f"exit {out.code}: {_said(out)}")
        if remote != digest.hexdigest():
            raise TransferError(f"sha256 differs: {source} has {remote}, "
                                f"{digest.hexdigest()} arrived")
        os.replace(tmp, local)
        return remote
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_range(transport: paramiko.Transport, path: str, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of the remote file ``path`` from ``offset``. Raises
    FileNotFoundError when there is no such file."""
    script = (f"[ -f {q(path)} ] || exit {MISSING}\n"
              f"tail -c +{offset + 1} {q(path)} | head -c {limit}\n")
    out = exec_bytes(transport, script, idle_timeout=60)
    if out.code == MISSING:
        raise FileNotFoundError(path)
    if out.code != 0:
        raise TransferError(f"cannot read {path}: exit {out.code}: {_said(out)}")
    return out.stdout


def _sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _said(out: ExecOutput) -> str:
    return " ".join(out.stderr.decode("utf-8", "replace").split())[:300] or "(no output)"


class _HashingSink:
    def __init__(self, fh: BinaryIO, digest: hashlib._Hash):
        self.fh, self.digest = fh, digest

    def write(self, data: bytes) -> None:
        self.digest.update(data)
        self.fh.write(data)
