"""The executor for this machine, through invoke's ``Context.run``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from invoke import Config, Context, Local
from invoke.exceptions import CommandTimedOut

from pipeline.errors import CommandTimeout, ExecutorError
from pipeline.hosts.executor import Executor, Result
from pipeline.spec.models import HostSpec

__all__ = ["LocalExecutor"]


class _InterruptibleLocal(Local):
    """invoke's own runner answers Ctrl-C by writing ``\\x03`` to the child's stdin and
    waiting on, so the KeyboardInterrupt is gone once a command that reads no stdin ends: a
    Ctrl-C'd ``harness run`` went on watching its stage. The harness's scripts are short
    and read nothing, so the interrupt is raised here (as fabric's runner does without a
    pty); the script itself runs to its end."""

    def send_interrupt(self, interrupt: KeyboardInterrupt) -> None:
        raise interrupt


class LocalExecutor(Executor):
    def __init__(self, host: HostSpec | None = None, *,
                 hosts: Mapping[str, HostSpec] | None = None,
                 notify: Callable[[str], None] | None = None):
        super().__init__(host or HostSpec(), notify=notify)
        self._context = Context(Config(overrides={"runners": {"local": _InterruptibleLocal}}))

    @property
    def workdir(self) -> str:
        return os.path.abspath(os.path.expanduser(self.host.workdir or os.getcwd()))

    def home(self) -> str:
        return str(Path.home())

    def _shell(self, script: str, timeout: float | None) -> tuple[int, str, str]:
        return self._shell_env(script, {}, timeout)

    def _shell_env(self, script: str, env: Mapping[str, str],
                   timeout: float | None) -> tuple[int, str, str]:
        """The values go into the shell's environment, never its command line: anyone on
        this machine can read any process's argv in /proc/PID/cmdline, while its
        environment is readable by its own user only."""
        try:
            # in_stream=False: a job must never read the harness's own stdin.
            r = self._context.run(script, hide=True, warn=True, in_stream=False,
                                  timeout=timeout, shell="/bin/sh", env=dict(env))
        except CommandTimedOut as exc:
            raise CommandTimeout(f"no answer from the local shell in {timeout:g}s",
                                 where=self.host.name,
                                 result=Result("(harness script)", -1, exc.result.stdout,
                                               exc.result.stderr)) from None
        return r.exited, r.stdout, r.stderr

    def _shell_input(self, script: str, data: bytes,
                     timeout: float | None) -> tuple[int, str, str]:
        """subprocess, not invoke: invoke feeds a child's stdin one byte per 10 ms."""
        try:
            r = subprocess.run(["/bin/sh", "-c", script], input=data, capture_output=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise CommandTimeout(f"no answer from the local shell in {timeout:g}s",
                                 where=self.host.name,
                                 result=Result("(harness script)", -1, _text(exc.stdout),
                                               _text(exc.stderr))) from None
        return r.returncode, _text(r.stdout), _text(r.stderr)

    def _read(self, path: str, offset: int, limit: int) -> bytes:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(limit)

    def put(self, local: str | Path, remote: str) -> str:
        target = self.resolve(remote)
        self._copy(local, target)
        return target

    def get(self, remote: str, local: str | Path) -> Path:
        self._copy(self.resolve(remote), local)
        return Path(local)

    def _copy(self, source: str | Path, target: str | Path) -> None:
        try:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        except OSError as exc:
            raise ExecutorError(f"cannot copy {source} to {target}: {exc}",
                                where=self.host.name) from None


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")
