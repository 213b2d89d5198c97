"""Showing stored text safely, and describing events for people.

Todo text is stored exactly as given. When shown, control characters and terminal escape
sequences are neutralised (made visible, e.g. ``\\x1b``), so a todo cannot move the
cursor, retitle the terminal or hide text. Newlines survive in full views and become
``⏎`` in one-line views.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from state.fold import LEASE_EXPIRED, Event, TodoState
from state.leases import Lease, iso

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


# A value in a history line is cut to this many characters; `--json` keeps it whole.
VALUE_WIDTH = 48
# Fields whose values are words from a fixed set: shown bare, not quoted.
_WORDS = {"status", "priority", "state", "origin", "stage", "host"}
# Run fields a history line leaves out: shown in `harness show`'s runs and in --json.
_RUN_HIDDEN = {"result"}
_TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


def short(value: Any, width: int = VALUE_WIDTH) -> str:
    """A stored value as a few words on one line: text quoted and cut, times to the
    second, todo ids as t1, anything structured as compact JSON, cut."""
    if value is None:
        return "none"
    if isinstance(value, str):
        if _TS.match(value):
            return value[:19].replace("T", " ")
        return repr(safe_line(value, width))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return "[" + ", ".join(f"t{v}" for v in value) + "]"
    if isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
        return safe_line(text, width)
    return safe_line(str(value), width)


def _change(name: str, old: Any, new: Any) -> str:
    """``name: old -> new``; a field set for the first time shows only its new value."""
    def fmt(v: Any) -> str:
        return safe_line(str(v), VALUE_WIDTH) if name in _WORDS and v is not None else short(v)
    if old is None or old == "" or old == []:
        return f"{name}: {fmt(new)}"
    return f"{name}: {fmt(old)} -> {fmt(new)}"


def job_label(job: Any) -> str:
    """Where a run's job runs, as people say it: ``on gpu`` or ``on cluster, slurm job
    4242`` (the stored record holds the whole host entry)."""
    if not isinstance(job, dict):
        return short(job)
    host = job.get("host")
    name = host.get("name") if isinstance(host, dict) else host
    label = f"on {safe_line(str(name or '?'), 40)}"
    if job.get("job_id"):
        scheduler = host.get("scheduler") if isinstance(host, dict) else None
        label += f", {scheduler + ' ' if scheduler else ''}job {safe_line(str(job['job_id']), 24)}"
    return label


def _run_update(p: dict[str, Any], ts: str) -> str:
    """``run r8 on local, pid 5625: queued -> running; run_dir: '/w/r8'``."""
    changes = dict(p.get("changes", {}))
    for name in ("started_at", "ended_at"):  # said already by the event's own time
        old, new = changes.get(name, (None, None))
        if old is None and isinstance(new, str) and new[:19] == ts[:19]:
            del changes[name]
    head = f"run r{p.get('run')}"
    job = changes.pop("job", None)
    if job is not None and job[1] is not None:
        head += " " + job_label(job[1])
    pid = changes.pop("pid", None)
    if pid is not None and pid[1] is not None:
        head += f", pid {pid[1]}"
    parts = []
    state = changes.pop("state", None)
    if state is not None:
        parts.append(f"{state[0]} -> {state[1]}" if state[0] else str(state[1]))
    if job is not None and job[1] is None:
        parts.append("job: none")
    if pid is not None and pid[1] is None:
        parts.append(f"pid: {pid[0]} -> none")
    parts += [_change(name, old, new) for name, (old, new) in changes.items()
              if name not in _RUN_HIDDEN]
    return head + (": " + "; ".join(parts) if parts else "")


def describe(ev: Event) -> str:
    """A one-line account of an event: what changed, from what, to what (long values
    cut; the whole event is in ``--json``)."""
    p = ev.payload
    k = ev.kind
    if k == "session.created":
        extra = f" (fork of session {p['parent_id']} at event {p.get('fork_n')})" \
            if p.get("parent_id") else ""
        pipeline = f" for pipeline {safe_line(str(p['pipeline']), 40)}" if p.get("pipeline") else ""
        return f"created session {short(p.get('name', ''))}{pipeline}{extra}"
    if k == "todo.created":
        bits = [p.get("status", "pending"), p.get("priority", "medium")]
        if p.get("stage"):
            bits.append(f"stage {p['stage']}")
        if p.get("depends_on"):
            bits.append("after " + ", ".join(f"t{d}" for d in p["depends_on"]))
        return f"created {short(p.get('content', ''))} ({', '.join(str(b) for b in bits)})"
    if k == "todo.updated":
        changes = dict(p.get("changes", {}))
        claim = _claim_change(changes)
        # The status first: it is what a reader looks for.
        parts = [_change(name, old, new) for name, (old, new) in
                 sorted(changes.items(), key=lambda c: c[0] != "status")]
        lease = p.get(LEASE_EXPIRED)
        if isinstance(lease, dict):
            return "; ".join([expiry_text(lease), *parts])
        return "; ".join(([claim] if claim and claim.startswith("claimed") else [])
                         + parts
                         + ([claim] if claim and not claim.startswith("claimed") else [])
                         ) or "updated"
    if k == "todo.removed":
        reason = f" ({safe_line(str(p['reason']), 40)})" if p.get("reason") else ""
        return f"removed {short(p.get('content', ''))}{reason}"
    if k == "todo.noted":
        return f"note: {safe_line(p.get('text', ''), 80)}"
    if k == "run.queued":
        stage = f" for stage {safe_line(str(p['stage']), 30)}" if p.get("stage") else ""
        return f"run r{p.get('run')}{stage} queued on {p.get('host')} " \
               f"(attempt {p.get('attempt', 1)})"
    if k == "run.updated":
        return _run_update(p, ev.ts)
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
        size = f" ({_size(p['size'])})" if isinstance(p.get("size"), int) else ""
        return f"artifact {safe_line(str(p.get('path', '')), 80)}{size}"
    return k


def _claim_change(changes: dict[str, Any]) -> str | None:
    """Takes the claim's fields out of a ``todo.updated``'s changes and says them in words:
    ``claimed by agent:w1 (lease 15m)``, ``released agent:w1's claim``."""
    holder = changes.pop("claimed_by", None)
    lease = changes.pop("lease_s", None)
    if holder is None:
        return None
    old, new = holder
    if new is not None:
        seconds = lease[1] if lease else None
        return f"claimed by {safe_line(str(new), 40)}" + (
            f" (lease {duration_text(seconds)})" if isinstance(seconds, (int, float)) else "")
    return f"released {safe_line(str(old), 40)}'s claim"


def duration_text(seconds: float) -> str:
    """``900`` -> ``15m``, ``5400`` -> ``1h30m``, ``2.5`` -> ``2.5s``."""
    if seconds < 60:
        return f"{seconds:g}s" if seconds == int(seconds) or seconds < 10 else f"{seconds:.0f}s"
    rest, out = round(seconds), ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            out += f"{n}{unit}"
    return out


def left_text(seconds: float) -> str:
    """Time left on a lease, short: ``1h05m``, ``12m``, ``42s``."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    if seconds >= 60:
        return f"{int(seconds // 60)}m"
    return f"{max(int(seconds), 0)}s"


def expiry_text(info: dict[str, Any]) -> str:
    """``lease of agent:w3 ran out at 12:00:03 (last heartbeat 12:00:01)`` (UTC), from the
    ``lease_expired`` part of the event that ended the lease."""
    def hms(value: Any) -> str:
        return str(value)[11:19] if isinstance(value, str) and _TS.match(value) else "?"
    return (f"lease of {safe_line(str(info.get('holder', '?')), 40)} ran out at "
            f"{hms(info.get('expired_at'))} (last heartbeat {hms(info.get('last_heartbeat_at'))})")


def claim_label(todo: TodoState, lease: Lease | None, now: float) -> str | None:
    """Who holds a claimed todo and for how long, for a board row: ``w3 · 12m left``,
    ``w3 · lease ran out`` (not ended yet: nobody has written since), ``w3`` (a claim
    without a lease). None: not claimed."""
    if todo.claimed_by is None:
        return None
    who = safe_line(todo.claimed_by.removeprefix("agent:"), 24)
    if lease is None or lease.holder != todo.claimed_by:
        return who
    left = lease.left(now)
    return f"{who} · {left_text(left)} left" if left > 0 else f"{who} · lease ran out"


def claim_text(todo: TodoState, lease: Lease | None, now: float | None) -> str:
    """``harness show``'s line on a claim: who, since when, and its lease: ``claimed by
    agent:w3 at 12:00:00; lease 15m, runs out at 12:15:03 (in 12m) unless renewed; last
    heartbeat 12:00:03`` (times UTC)."""
    when = (todo.claimed_at or "")[11:19]
    head = f"claimed by {safe_line(str(todo.claimed_by), 40)}" + (f" at {when}" if when else "")
    if todo.lease_s is None:
        return head + "; no lease (it lasts until the todo leaves in progress)"
    head += f"; lease {duration_text(todo.lease_s)}"
    if lease is None or now is None or lease.holder != todo.claimed_by:
        return head
    ends = iso_time(lease.expires_at)
    left = lease.left(now)
    state = (f"runs out at {ends} (in {left_text(left)}) unless renewed" if left > 0
             else f"ran out at {ends}; ended by the next write")
    return f"{head}, {state}; last heartbeat {iso_time(lease.heartbeat_at)}"


def iso_time(epoch: float) -> str:
    """A lease time of day, UTC, as the history shows times: ``12:00:03``."""
    return iso(epoch)[11:19]


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
