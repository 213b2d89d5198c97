"""Which format a file is in, from its first bytes (never from its name).

A ``harness export`` file is known here; every other format is an agent's, and each
agent of the registry says whether a file is its own (:mod:`harness.agents.seam`: first
from its text, then from one of its first JSON lines, then, for a pretty-printed JSON
document, from its keys), asked in the registry's order.
"""

from __future__ import annotations

import json
from typing import Any

from harness.agents.registry import agents
from harness.errors import InputError
from harness.export import is_export_header


def formats() -> tuple[str, ...]:
    """Every format ``harness import`` reads: each agent's, then ``harness``."""
    return (*(f for a in agents() for f in a.formats), "harness")


def _first_values(head: bytes, limit: int = 20) -> list[Any]:
    out = []
    for raw in head.splitlines()[:limit]:
        raw = raw.strip()
        if not raw:
            continue
        try:
            out.append(json.loads(raw))
        except (ValueError, RecursionError):
            continue
    return out


def detect(head: bytes, where: str) -> str:
    """The format of a file that starts with ``head``; :class:`InputError` if unknown."""
    text = head.decode("utf-8", "replace")
    stripped = text.lstrip("\ufeff \t\r\n")
    if not stripped:
        raise InputError("empty file: nothing to import", where=where)
    known = agents()
    for a in known:
        fmt = a.sniff_text(text)
        if fmt:
            return fmt
    for obj in _first_values(head):
        if not isinstance(obj, dict):
            continue
        if is_export_header(obj):
            return "harness"
        for a in known:
            fmt = a.sniff_line(obj)
            if fmt:
                return fmt
    if stripped.startswith(("{", "[")):
        for a in known:
            fmt = a.sniff_document(text)
            if fmt:
                return fmt
    if b"\x00" in head:
        raise InputError("binary file (NUL bytes): not a transcript", where=where)
    first = stripped.splitlines()[0][:60] if stripped else ""
    titles = ", ".join(a.title for a in known if a.formats)
    raise InputError(f"unknown format (starts with {first!r}): not a {titles} or harness "
                     "transcript", where=where,
                     hint="name it with --format (see `harness import --help`)")
