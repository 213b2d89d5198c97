"""Showing stored text safely, and describing events for people.

Todo text is stored exactly as given. When shown, control characters and terminal escape
sequences are neutralised (made visible, e.g. ``\\x1b``), so a todo cannot move the
cursor, retitle the terminal or hide text. Newlines survive in full views and become
``⏎`` in one-line views.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from state.fold import Event

# How the CLI board and the TUI show a status and a priority.
GLYPH = {"in_progress": "▶", "pending": "○", "blocked": "■", "completed": "✓", "cancelled": "✗"}
BADGE = {"high": "H", "medium": "M", "low": "L"}
SECTION = {"in_progress": "In progress", "pending": "Pending", "blocked": "Blocked",
           "completed": "Completed", "cancelled": "Cancelled"}


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _is_control(ch: str) -> bool:
    code = ord(ch)
    # C0, DEL, C1, and the bidi overrides that can reorder what a person reads.
    return (code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0
            or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069)


def safe_text(text: str) -> str:
    """Full view: keep newlines and tabs, make every other control character visible."""
    return "".join(ch if ch in "\n\t" or not _is_control(ch) else _escape(ch) for ch in text)


def safe_line(text: str, width: int | None = None) -> str:
    """One-line view: newlines become ⏎, other controls become visible escapes."""
    out = "".join("⏎" if ch == "\n" else " " if ch == "\t" else
                  (_escape(ch) if _is_control(ch) else ch) for ch in text.rstrip("\n"))
    if width is not None and len(out) > width:
        out = out[: max(width - 1, 0)] + "…"
    return out


def aligned(rows: Sequence[Sequence[str]], caps: Sequence[int | None] = (),
            sep: str = "  ") -> list[str]:
    """Rows of cells as lines whose columns line up however long a cell is: each column
    (but the last) is as wide as its widest cell, or its cap (longer cells are cut with
    ``…``). Cells are shown as one-line text."""
    if not rows:
        return []
    n = max(len(r) for r in rows)
    cells = [[safe_line(c) for c in r] + [""] * (n - len(r)) for r in rows]
    caps = list(caps) + [None] * (n - len(caps))
    widths = []
    for i in range(n - 1):
        widest = max(len(r[i]) for r in cells)
        cap = caps[i]
        widths.append(min(widest, cap) if cap else widest)
    out = []
    for r in cells:
        parts = [safe_line(c, w).ljust(w) for c, w in zip(r, widths, strict=False)]
        last = r[-1] if caps[-1] is None else safe_line(r[-1], caps[-1])
        out.append(sep.join([*parts, last]).rstrip())
    return out


def _val(value: Any) -> str:
    if isinstance(value, str):
        return repr(safe_line(value, 60))
    if isinstance(value, list):
        return "[" + ", ".join(f"t{v}" if isinstance(v, int) else str(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def describe(ev: Event) -> str:
    """A one-line account of an event: what changed, from what, to what."""
    p = ev.payload
    k = ev.kind
    if k == "session.created":
        extra = f" (fork of session {p['parent_id']} at event {p.get('fork_n')})" \
            if p.get("parent_id") else ""
        return f"created session {p.get('name', '')!r}{extra}"
    if k == "todo.created":
        bits = [p.get("status", "pending"), p.get("priority", "medium")]
        if p.get("stage"):
            bits.append(f"stage {p['stage']}")
        return f"created {_val(p.get('content', ''))} ({', '.join(bits)})"
    if k == "todo.updated":
        parts = []
        for name, (old, new) in p.get("changes", {}).items():
            parts.append(f"{name}: {_val(old)} -> {_val(new)}")
        return "; ".join(parts)
    if k == "todo.removed":
        return f"removed {_val(p.get('content', ''))} ({p.get('reason', '')})"
    if k == "todo.noted":
        return f"note: {safe_line(p.get('text', ''), 80)}"
    if k == "run.queued":
        return f"run r{p.get('run')} queued on {p.get('host')} (attempt {p.get('attempt', 1)})"
    if k == "run.updated":
        parts = [f"{name}: {_val(old)} -> {_val(new)}"
                 for name, (old, new) in p.get("changes", {}).items()
                 if name not in ("result",)]
        return f"run r{p.get('run')} " + "; ".join(parts)
    if k == "verification.recorded":
        verdict = "passed" if p.get("passed") else "failed"
        return f"verification v{p.get('verification')} {verdict}: " \
               f"{safe_line(p.get('verdict', ''), 80)}"
    if k == "agent.context":
        # Where an agent's context was cut (or began): compact, clear, resume, startup.
        trigger = f" ({p['trigger']})" if p.get("trigger") else ""
        who = safe_line(str(p.get("agent", "agent")), 40)
        sid = safe_line(str(p.get("agent_session") or ""), 40)[:8]
        return f"context cut: {p.get('cut', '?')}{trigger} of {who} session {sid}".rstrip()
    if k == "artifact.recorded":
        return f"artifact {safe_line(str(p.get('path', '')), 80)}"
    return k
