"""An exception nothing in the TUI handled: the app ends, a person gets one line, and the
traceback goes to a log file that line names (``<data dir>/logs/tui.log``), not onto the
terminal."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.worker import WorkerFailed

from harness.agents.logfile import log, log_path
from harness.render import safe_line

LOG_NAME = "tui"


@dataclass(frozen=True)
class Crash:
    summary: str  # the exception's type and first line
    log: Path | None  # where its traceback went (None: it could not be written)

    def message(self) -> str:
        return f"the TUI stopped on an unexpected error ({self.summary})"

    def hint(self) -> str:
        if self.log is None:
            return (f"its traceback could not be written to {log_path(LOG_NAME)}; "
                    "please report the error and the keys that led to it")
        return f"its traceback is in {self.log}; please report it with the keys that led to it"


def record(error: BaseException) -> Crash:
    """Write ``error``'s traceback to the TUI's log; what to tell the person."""
    if isinstance(error, WorkerFailed) and isinstance(error.error, BaseException):
        error = error.error  # the store thread's own exception, not Textual's wrapper
    text = str(error).strip().splitlines()
    summary = type(error).__name__ + (f": {text[0]}" if text else "")
    summary = safe_line(summary, 200)
    return Crash(summary, log(LOG_NAME, f"the TUI stopped: {summary}", error))
