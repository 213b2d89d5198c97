"""Where long-lived and fire-and-forget parts (the MCP server, hooks, the Codex watcher)
write what went wrong, since nobody reads their terminal: ``<data dir>/logs/NAME.log``.
"""

from __future__ import annotations

import os
import traceback
from datetime import datetime, timezone
from pathlib import Path

from harness.paths import data_dir

MAX_LOG_BYTES = 5 * 1024 * 1024


def log_path(name: str) -> Path:
    return data_dir() / "logs" / f"{name}.log"


def log(name: str, message: str, exc: BaseException | None = None) -> Path | None:
    """Append one entry (with the traceback of ``exc``, if any). Never raises: a log that
    cannot be written must not turn into the failure it was meant to record."""
    path = log_path(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > MAX_LOG_BYTES:
            os.replace(path, path.with_suffix(".log.1"))  # keep one old file, not forever
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        text = f"{stamp} [{os.getpid()}] {message}\n"
        if exc is not None:
            text += "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        with path.open("a", encoding="utf-8") as fh:
            fh.write(text)
        return path
    except OSError:
        return None
