"""How values are stored: timestamps as sortable text, JSON as canonical text, and the
one character no backend may keep (NUL).

Pure standard library: the write path imports this, and it must stay cheap to import.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from state.errors import InvalidChange


def utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def normalize_ts(value: str | float | int | datetime) -> str:
    """Any timestamp we accept -> our canonical sortable text form (UTC, microseconds, Z)."""
    if isinstance(value, (int, float)):
        # Epoch seconds or milliseconds (agents use both).
        secs = value / 1000 if value > 1e11 else value
        dt = datetime.fromtimestamp(secs, tz=timezone.utc)
    elif isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    else:
        s = value.strip()
        if s.endswith("Z"):
            s = s[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            raise InvalidChange(f"not an ISO-8601 timestamp: {value!r}") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def nul_at(obj: Any, path: str = "") -> str | None:
    """Where a NUL character hides in ``obj`` (a dotted path), or None.

    PostgreSQL's TEXT cannot hold NUL, so no backend may store one: a store must copy
    between SQLite and PostgreSQL without loss, and behave the same on both.
    """
    if isinstance(obj, str):
        return (path or "text") if "\x00" in obj else None
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = nul_at(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = nul_at(v, f"{path}[{i}]")
            if found:
                return found
    return None
