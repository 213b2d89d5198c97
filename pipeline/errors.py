"""Errors raised by the pipeline layer.

The tree, drawn once::

    PipelineError                 exit 1 unless noted
    ├── SpecError                 a pipeline YAML that does not validate (file, stage, field)
    ├── ActionError               a built-in action that cannot proceed (bad input file, shape)
    ├── ExecutorError             a command or transfer on a host failed
    │   ├── CommandFailed         a command exited non-zero (``result`` has the evidence)
    │   ├── HostUnreachable       exit 3: cannot connect / authenticate to a host
    │   └── CommandTimeout        exit 4: a command outlived its timeout
    └── JobError                  a detached job's files are missing or inconsistent

Every error carries ``message`` and optionally ``where`` (a file, a stage, a host) and
``hint`` (what to do). Executor errors about a command also carry ``result`` (the redacted
command, exit code, stdout, stderr), as invoke's and fabric's failures do. The harness CLI renders them on one line; the pipeline layer never
prints tracebacks for them. Standard library only: this module ships to bare GPU hosts.
"""

from __future__ import annotations

from typing import Any


class PipelineError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return f"{text} (hint: {self.hint})" if self.hint else text


class SpecError(PipelineError):
    pass


class ActionError(PipelineError):
    pass


class ExecutorError(PipelineError):
    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None,
                 result: Any = None):
        super().__init__(message, where=where, hint=hint)
        #: The :class:`pipeline.hosts.executor.Result` of the command, when there was one.
        self.result = result


class CommandFailed(ExecutorError):
    pass


class HostUnreachable(ExecutorError):
    exit_code = 3

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None,
                 retryable: bool = True):
        super().__init__(message, where=where, hint=hint)
        #: False for failures that waiting will not fix (bad host key, refused credentials),
        #: so reconnect loops give up at once instead of burning their budget.
        self.retryable = retryable


class CommandTimeout(ExecutorError):
    exit_code = 4


class JobError(PipelineError):
    pass


def exc_line(exc: BaseException, limit: int = 300) -> str:
    """A library's exception as one line of at most ``limit`` characters: every non-empty
    line joined, since some (pydantic's, which vLLM raises for a bad config) put the reason
    after a first line that only counts the errors; the class name when it says nothing."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return (text or type(exc).__name__)[:limit]
