"""One executor interface for running commands and detached jobs on a host.

The same methods work on this machine (:class:`pipeline.hosts.local.LocalExecutor`, through
invoke), over SSH (:class:`pipeline.hosts.ssh.SSHExecutor`, through fabric) and on a Slurm
cluster (:class:`pipeline.hosts.slurm.SlurmExecutor`, jobs submitted with ``sbatch`` through
either of the other two), in the way invoke's ``Context`` and fabric's ``Connection`` share
``.run()``::

    with executor_for(pipeline.host_for(stage), pipeline.hosts) as ex:
        handle = ex.start_detached(run_id, stage.command(host, result_path=...), env=...)
        while (status := ex.poll(handle)).state == "running":
            chunk, offset = ex.tail(handle, offset)

Transports provide only :meth:`Executor._shell`, :meth:`Executor._shell_input`,
:meth:`Executor._read`, ``put``, ``get``, ``close`` and ``home``; everything about detached jobs lives here and in
:mod:`pipeline.hosts.jobscripts`, so both hosts behave the same. A scheduler's executor keeps the
transport of its login node and replaces the job methods (``start_detached``, ``attach``,
``poll``, ``cancel``). Which class runs a host is named in :mod:`pipeline.registry`.
Importing this module does not import fabric.
"""

from __future__ import annotations

import re
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

from pipeline import registry
from pipeline.errors import CommandFailed, CommandTimeout, ExecutorError, JobError
from pipeline.hosts import jobscripts
from pipeline.redact import describe, redact_text, secret_values
from pipeline.spec.models import HostSpec

__all__ = ["RUNS_DIR", "Executor", "JobHandle", "JobState", "JobStatus", "Result",
           "executor_for"]

T = TypeVar("T")
RUNS_DIR = ".harness/runs"
JobState = Literal["running", "succeeded", "failed", "cancelled", "lost"]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `timeout` exits 124 when it had to TERM the command, 137 when it had to KILL it.
_TIMEOUT_CODES = (124, 137)


@dataclass(frozen=True)
class Result:
    """What a finished command left: the redacted command, its exit code and output."""

    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class JobHandle:
    """A detached job on a host. Everything needed to find it again is in ``run_dir``."""

    run_id: str
    host: str
    run_dir: str
    pid: int | None
    command: str
    #: True when start_detached found the job already there and did not launch it.
    attached: bool = False
    #: The scheduler's id for the job (a Slurm job id), when a scheduler runs it.
    job_id: str | None = None

    @property
    def ident(self) -> str:
        """``pid 4242`` or ``slurm job 17``: how people find the job on its host."""
        return f"slurm job {self.job_id}" if self.job_id else f"pid {self.pid}"

    @property
    def log_path(self) -> str:
        return f"{self.run_dir}/log"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobHandle:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    exit_code: int | None = None
    pid: int | None = None
    #: Why it ended, in the scheduler's words, when that says more than the exit code
    #: (``Slurm killed job 17 at its time limit (TIMEOUT)``); None otherwise.
    reason: str | None = None
    #: The signal that ended it, when the scheduler reports one.
    signal: int | None = None

    @property
    def finished(self) -> bool:
        return self.state != "running"


@dataclass(frozen=True)
class JobInputs:
    env: dict[str, str]   # the host's environment under the job's own, checked
    run_dir: str
    wrapper: str          # the job's argv, run in its working directory
    description: str      # the command as shown, secrets masked


class Executor(ABC):
    """Runs commands and detached jobs on one host. Use as a context manager to close it."""

    def __init__(self, host: HostSpec, *, notify: Callable[[str], None] | None = None):
        self.host = host
        self._notify = notify
        self._noted: set[str] = set()

    def note(self, message: str) -> None:
        """Tell the person running this, once per message, something about the host that
        changes how it is driven (e.g. that it has no SFTP)."""
        if message not in self._noted:
            self._noted.add(message)
            if self._notify is not None:
                self._notify(message)

    # --- the transport: what a subclass provides -----------------------------------------

    @abstractmethod
    def _shell(self, script: str, timeout: float | None) -> tuple[int, str, str]:
        """Run POSIX shell text on the host; return (exit code, stdout, stderr)."""

    @abstractmethod
    def _shell_input(self, script: str, data: bytes,
                     timeout: float | None) -> tuple[int, str, str]:
        """Run POSIX shell text on the host with ``data`` as its standard input (then end
        of file); return (exit code, stdout, stderr)."""

    def _shell_env(self, script: str, env: Mapping[str, str],
                   timeout: float | None) -> tuple[int, str, str]:
        """Run ``script`` with ``env`` in its environment. This default sends the values
        as ``export`` lines on the shell's standard input, which the shell evaluates before
        the script: never in its command line, which any user of the host can read (``ps``,
        ``/proc/PID/cmdline``). A transport that can hand the shell an environment of its
        own (this machine) overrides it."""
        if not env:
            return self._shell(script, timeout)
        sent = jobscripts.stdin_env(env)
        return self._shell_input(sent.prelude + script, sent.data, timeout)

    @abstractmethod
    def _read(self, path: str, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes of the file at absolute ``path`` from ``offset``.

        Raises FileNotFoundError when there is no such file.
        """

    @abstractmethod
    def put(self, local: str | Path, remote: str) -> str:
        """Copy a local file to the host (parents created); return the absolute remote path."""

    @abstractmethod
    def get(self, remote: str, local: str | Path) -> Path:
        """Copy a file from the host to ``local``; return ``local``."""

    @abstractmethod
    def home(self) -> str:
        """The login user's home directory on the host."""

    def close(self) -> None:  # noqa: B027 - a no-op is the right default for local hosts
        """Release the connection, if any. The executor reopens it when used again."""

    def with_reconnect(self, fn: Callable[[], T]) -> T:
        """Run an idempotent operation; SSH overrides this to reconnect with backoff."""
        return fn()

    # --- paths ---------------------------------------------------------------------------

    @property
    def workdir(self) -> str:
        """The host's working directory, absolute."""
        return self.resolve(self.host.workdir or "~", base=self.home())

    def resolve(self, path: str, *, base: str | None = None) -> str:
        """``~/x`` -> home/x, ``x`` -> workdir/x, absolute paths unchanged."""
        if path == "~" or path.startswith("~/"):
            return str(PurePosixPath(self.home()) / path[2:]) if path != "~" else self.home()
        if PurePosixPath(path).is_absolute():
            return path
        return str(PurePosixPath(base if base is not None else self.workdir) / path)

    def run_dir(self, run_id: str) -> str:
        """Where the files of detached job ``run_id`` live on the host."""
        _check_run_id(run_id)
        return f"{self.workdir}/{RUNS_DIR}/{run_id}"

    # --- commands ------------------------------------------------------------------------

    def run(self, command: Sequence[str] | str, *, env: Mapping[str, str] | None = None,
            cwd: str | None = None, timeout: float | None = None, warn: bool = False) -> Result:
        """Run a command to completion on the host.

        ``command`` is an argv list (quoted for the shell; nothing in it is interpreted) or a
        string of shell text (interpreted, by design: for the harness's own scripts). ``cwd``
        defaults to the workdir (created if missing); relative paths are under the workdir.
        The host's ``env`` is applied under ``env``. A non-zero exit raises
        :class:`CommandFailed` unless ``warn``; outliving ``timeout`` seconds kills the
        command's whole process group and raises :class:`CommandTimeout`. Both carry the
        :class:`Result`.
        """
        full_env = {**self.host.env, **(env or {})}
        check_env(full_env)
        where = self.resolve(cwd) if cwd else self.workdir
        lines = [] if cwd else [f"mkdir -p {shlex.quote(where)}"]
        lines.append(f"cd {shlex.quote(where)} || exit 1")
        lines.append(command if isinstance(command, str) else f"exec {shlex.join(command)}")
        script = "\n".join(lines)
        grace = None
        if timeout is not None:
            # coreutils `timeout` signals the whole process group it creates, so children
            # die too; the client-side limit is only a backstop for a hung transport.
            script = f"timeout -k 5 {timeout:g} sh -c {shlex.quote(script)}"
            grace = timeout + 30
        started = time.monotonic()
        code, out, err = self._shell_env(script, full_env, grace)
        secrets = secret_values(full_env)
        result = Result(command=describe(command, env or {}, cwd),
                        exit_code=code, stdout=redact_text(out, secrets),
                        stderr=redact_text(err, secrets))
        if timeout is not None and code in _TIMEOUT_CODES and \
                time.monotonic() - started >= timeout:
            raise CommandTimeout(f"timed out after {timeout:g}s: {result.command}",
                                 where=self.host.name, result=result)
        if code != 0 and not warn:
            last = (result.stderr.strip().splitlines() or [""])[-1]
            tail = f": {last}" if last else ""
            raise CommandFailed(f"exit {code} from {result.command}{tail}",
                                where=self.host.name, result=result)
        return result

    # --- detached jobs -------------------------------------------------------------------

    def start_detached(self, run_id: str, argv: Sequence[str], *,
                       env: Mapping[str, str] | None = None,
                       cwd: str | None = None) -> JobHandle:
        """Start ``argv`` as a job that outlives this process and the connection.

        Idempotent per ``run_id``: if the run directory already holds a job (running or
        finished) this re-attaches to it and launches nothing. Safe to retry after a
        dropped connection for the same reason.
        """
        job = self._job_inputs(run_id, argv, env, cwd)
        run_dir, description = job.run_dir, job.description
        script = jobscripts.launch_script(run_dir, job.wrapper, description)
        code, out, err = self.with_reconnect(lambda: self._shell_env(script, job.env, 60))
        words = out.split()
        if code != 0 or not words or words[0] not in ("launched", "attached"):
            raise JobError(f"could not start job {run_id!r}: exit {code}: "
                           f"{' '.join((err or out).split())[:300]}", where=self.host.name)
        pid = _int(words[1]) if len(words) > 1 else None
        if pid is None:
            log = self._read_text(f"{run_dir}/log")
            raise JobError(f"job {run_id!r} did not record a pid; its log says: "
                           f"{' '.join(log.split())[-300:] or '(nothing)'}",
                           where=self.host.name)
        if words[0] == "attached":
            description = self._read_text(f"{run_dir}/cmd").strip() or description
        return JobHandle(run_id=run_id, host=self.host.name, run_dir=run_dir, pid=pid,
                         command=description, attached=words[0] == "attached")

    def _job_inputs(self, run_id: str, argv: Sequence[str], env: Mapping[str, str] | None,
                    cwd: str | None) -> JobInputs:
        """What every kind of detached job starts from, checked before anything is sent."""
        if isinstance(argv, str):
            raise TypeError("start_detached takes an argv list; use ['bash', '-c', text]")
        argv = list(argv)
        full_env = {**self.host.env, **(env or {})}
        check_env(full_env)
        where = self.resolve(cwd) if cwd else self.workdir
        return JobInputs(env=full_env, run_dir=self.run_dir(run_id),
                         wrapper=jobscripts.job_wrapper(argv, where),
                         description=describe(argv, env or {}, where))

    def attach(self, run_id: str) -> JobHandle | None:
        """The handle of an existing job, from its files alone; None if there is none."""
        run_dir = self.run_dir(run_id)
        status = self._poll_dir(run_dir)
        if status is None:
            return None
        command = self._read_text(f"{run_dir}/cmd").strip()
        return JobHandle(run_id=run_id, host=self.host.name, run_dir=run_dir,
                         pid=status.pid, command=command, attached=True)

    def poll(self, handle: JobHandle) -> JobStatus:
        """running, or how it ended: succeeded/failed (exit code), cancelled, or lost."""
        status = self._poll_dir(handle.run_dir)
        if status is None:
            raise JobError(f"no job {handle.run_id!r} in {handle.run_dir}", where=self.host.name)
        return status

    def tail(self, handle: JobHandle, offset: int = 0,
             limit: int = 1 << 20) -> tuple[bytes, int]:
        """Log bytes from ``offset`` (at most ``limit``) and the offset to ask for next."""
        try:
            data = self.with_reconnect(lambda: self._read(handle.log_path, offset, limit))
        except FileNotFoundError:  # not written yet
            data = b""
        return data, offset + len(data)

    def read_bytes(self, path: str, limit: int = 64 << 20) -> bytes:
        """A (small) file from the host, e.g. a stage's result JSON; relative to the workdir."""
        target = self.resolve(path)
        try:
            return self.with_reconnect(lambda: self._read(target, 0, limit))
        except FileNotFoundError:
            raise ExecutorError(f"no such file: {target}", where=self.host.name) from None

    def cancel(self, handle: JobHandle, *, grace: float = 10.0) -> JobStatus:
        """TERM the job's process group, KILL it after ``grace`` seconds; return its status."""
        script = jobscripts.cancel_script(handle.run_dir, grace)
        code, out, err = self.with_reconnect(lambda: self._shell(script, grace + 60))
        if code != 0 or out.strip() == "missing":
            raise JobError(f"could not cancel job {handle.run_id!r}: "
                           f"{' '.join((err or out).split())[:300]}", where=self.host.name)
        return self.poll(handle)

    def _poll_dir(self, run_dir: str) -> JobStatus | None:
        script = jobscripts.poll_script(run_dir)
        code, out, err = self.with_reconnect(lambda: self._shell(script, 60))
        words = out.split()
        if code != 0 or not words:
            raise JobError(f"could not poll {run_dir}: {' '.join(err.split())[:300]}",
                           where=self.host.name)
        if words[0] == "missing":
            return None
        kind, exit_code, pid, cancelled = (words + ["-"] * 4)[:4]
        code_n, pid_n = _int(exit_code), _int(pid)
        if cancelled == "cancelled" and not (kind == "exit" and code_n == 0):
            state: JobState = "running" if kind == "running" else "cancelled"
        elif kind == "exit":
            state = "succeeded" if code_n == 0 else "failed"
        elif kind == "running":
            state = "running"
        else:
            state = "lost"
        return JobStatus(state=state, exit_code=code_n, pid=pid_n)

    def _read_text(self, path: str) -> str:
        try:
            data = self.with_reconnect(lambda: self._read(path, 0, 1 << 16))
        except (OSError, ExecutorError):  # a description is best effort
            return ""
        return data.decode("utf-8", "replace")

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def executor_for(host: HostSpec, hosts: Mapping[str, HostSpec] | None = None, *,
                 notify: Callable[[str], None] | None = None, transport: bool = False,
                 **kwargs: Any) -> Executor:
    """The executor registered for ``host``'s kind (:mod:`pipeline.registry`): local, SSH,
    or a scheduler such as Slurm. ``hosts`` resolves a ``gateway`` by name; ``notify``
    hears the executor's one-time notes; ``transport`` skips a scheduler and gives the
    executor of its login node. Each class is imported only when used (fabric only for
    SSH)."""
    cls = registry.executor_class(registry.executor_kind(host, transport=transport))
    return cls(host, hosts=hosts, notify=notify, **kwargs)


def check_env(env: Mapping[str, str]) -> None:
    """Refuse environment names a shell would misread and values that are not text."""
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key):
            raise ExecutorError(f"bad environment variable name {key!r}")
        if not isinstance(value, str):
            raise ExecutorError(f"environment value of {key} must be text, got {value!r}")


def _check_run_id(run_id: str) -> None:
    # Any byte is fine inside quotes; only what changes the path itself is refused.
    if not run_id or run_id in (".", "..") or "/" in run_id or "\0" in run_id \
            or len(run_id.encode()) > 200:
        raise JobError(f"bad run id {run_id!r}: it names one directory, so no '/', '.' or '..'")


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
