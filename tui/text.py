"""Turning stored values into text for the screen.

Everything that came from the store (todo text, reasons, actors, log output) passes
through :func:`harness.render.safe_line` / :func:`harness.render.safe_text` and is then
wrapped in :class:`rich.text.Text`, never parsed as markup: a todo reading ``[bold]`` or
holding ``\\x1b[31m`` is shown exactly as typed.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from rich.text import Text

from harness.render import safe_line, safe_text
from state.fold import RunState

# CSI (colours, cursor moves) and OSC (titles, hyperlinks) sequences in job output. They
# are display-only: the log tail drops them instead of showing them as escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def line(value: str | None, width: int | None = None, style: str = "") -> Text:
    """A one-line, literal view of stored text."""
    return Text(safe_line(value or "", width), style=style, no_wrap=True, overflow="ellipsis")


def block(value: str | None, style: str = "") -> Text:
    """A full, literal view of stored text (newlines kept)."""
    return Text(safe_text(value or ""), style=style)


def log_line(raw: str) -> str:
    """One line of job output as a terminal would leave it, made safe.

    A carriage return rewinds the line (progress bars), so only what follows the last one
    is kept; colour codes are dropped; anything else non-printing is made visible.
    """
    raw = raw.rstrip("\r")
    if "\r" in raw:
        raw = raw.rsplit("\r", 1)[1]
    return safe_line(_ANSI.sub("", raw))


def clock(ts: str | None) -> str:
    """``2026-11-30T12:03:04.123456Z`` -> ``2026-11-30 12:03:04``."""
    return (ts or "")[:19].replace("T", " ")


def parse_ts(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def run_duration(run: RunState, now: datetime) -> str:
    """How long a run took, or has been running for; empty if it never started."""
    start = parse_ts(run.started_at)
    if start is None:
        return ""
    end = parse_ts(run.ended_at) or (now if run.state == "running" else None)
    return duration((end - start).total_seconds()) if end else ""


def number(value: object) -> str:
    """Measured values as people read them: 0.4213 -> 0.421, 3.0 -> 3, lists shortened."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() and abs(value) < 1e15 else f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(number(v) for v in value[:6])
        return f"[{inner}{', …' if len(value) > 6 else ''}]"
    if value is None:
        return "—"
    return safe_line(str(value), 40)
