"""Errors of the harness layer, and the one place every error becomes a line of text.

The tree, drawn once::

    HarnessError                  exit 1 unless noted
    ├── UsageError                exit 2: a bad flag or argument combination
    ├── InputError                malformed input: JSON, a payload shape, a file
    │   └── PayloadTooLarge       an agent payload over the size limit
    ├── NoSession                 no such session
    └── Interrupted               exit 130
        └── Terminated            exit 128 + signal: SIGTERM/SIGHUP during `harness run`

The state and pipeline layers have their own roots (``state.errors.StoreError``,
``pipeline.errors.PipelineError``) with the same fields, because they may not import us.
:func:`render` formats any of the three the same way; the CLI calls it once, at its edge.
"""

from __future__ import annotations

from pipeline.errors import PipelineError
from state.errors import StoreError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_TIMEOUT = 4
EXIT_INTERRUPTED = 130


class HarnessError(Exception):
    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return f"{text} (hint: {self.hint})" if self.hint else text


class UsageError(HarnessError):
    exit_code = EXIT_USAGE


class InputError(HarnessError):
    pass


class PayloadTooLarge(InputError):
    pass


class NoSession(HarnessError):
    pass


class Interrupted(HarnessError):
    exit_code = EXIT_INTERRUPTED


class Terminated(Interrupted):
    def __init__(self, message: str, *, signum: int, where: str | None = None,
                 hint: str | None = None):
        super().__init__(message, where=where, hint=hint)
        self.exit_code = 128 + signum  # the shell's convention for a death by signal


KNOWN_ERRORS = (HarnessError, StoreError, PipelineError)


def render(exc: BaseException) -> str:
    """One line, no traceback: ``error: <where>: <message> (hint: ...)``."""
    text = " ".join(str(exc).split("\n")) if str(exc) else type(exc).__name__
    return f"error: {text}"


def exit_code(exc: BaseException) -> int:
    return int(getattr(exc, "exit_code", EXIT_ERROR))
