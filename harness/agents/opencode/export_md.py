"""opencode's markdown export (``/export`` in the TUI, or a shared session saved as text).

The shape: a ``# title`` line, ``**Session ID:** ses_...``, ``**Created:**`` and
``**Updated:**`` lines (local time, as the exporter's clock showed it), then ``## User``
and ``## Assistant (mode · model · 8.7s)`` sections. A todo call is::

    **Tool: todowrite**

    **Input:**
    ```json
    {"todos": [{"content": ..., "status": ..., "priority": ...}]}
    ```

The export has no time per message. We take the session's start (the default title
``New session - <ISO time>`` is exact UTC; else the ``Created:`` line, read as UTC) and
add each assistant reply's duration in turn, capped at ``Updated:``: the order is exact,
the times are estimates, and the import summary says so. A call's ``ref`` is the
session id and the call's ordinal (``ses_...#todowrite3``): the export has no call ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import IO

from harness.agents.transcripts import (
    BINARY_LINE,
    Call,
    Item,
    Parser,
    Skipped,
    binary_line,
    json_error,
    read_lines,
)
from harness.errors import InputError
from harness.formats import parse

_SESSION = re.compile(r"^\*\*Session ID:\*\*\s*(\S+)")
_CREATED = re.compile(r"^\*\*Created:\*\*\s*(.+?)\s*$")
_UPDATED = re.compile(r"^\*\*Updated:\*\*\s*(.+?)\s*$")
_TITLE_ISO = re.compile(r"^# .*?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)\s*$")
_ASSISTANT = re.compile(r"^## Assistant\b(?:.*?·\s*([\d.]+)(ms|s|m)\s*\))?")
_TOOL = re.compile(r"^\*\*Tool:\s*([\w.-]+)\*\*")
_LOCAL_FORMATS = ("%m/%d/%Y, %I:%M:%S %p", "%d/%m/%Y, %H:%M:%S", "%Y-%m-%d %H:%M:%S",
                  "%m/%d/%Y, %H:%M:%S")


def _local(text: str) -> datetime | None:
    for fmt in _LOCAL_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


class OpencodeMarkdownParser(Parser):
    fmt = "opencode-export"

    def __init__(self, fh: IO[bytes], where: str, *, fallback_ts: str | None = None):
        super().__init__(fh, where, fallback_ts=fallback_ts)
        self._start: datetime | None = None
        self._end: datetime | None = None
        self._offset = timedelta(0)
        self._title_utc: datetime | None = None
        self._elapsed = timedelta(0)
        self._calls = 0

    def _now(self) -> str | None:
        if self._start is None:
            return self.fallback_ts
        at = self._start + self._elapsed
        if self._end is not None and at > self._end:
            at = self._end
        return at.isoformat(timespec="microseconds").replace("+00:00", "Z")

    def _header(self, line: str) -> None:
        m = _TITLE_ISO.match(line)
        if m:
            self._title_utc = datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
        m = _SESSION.match(line)
        if m:
            self.info.session_hint = m.group(1)
        m = _CREATED.match(line)
        if m:
            local = _local(m.group(1))
            if local is not None and self._title_utc is not None:
                # The default title has the exact UTC time: it tells the exporter's zone.
                diff = local - self._title_utc.replace(tzinfo=None)
                self._offset = timedelta(minutes=round(diff.total_seconds() / 900) * 15)
                self._start = self._title_utc
            elif local is not None:
                self._start = local.replace(tzinfo=timezone.utc)
                self.info.notes.append("times in the export are local; read as UTC")
            if self._start is not None:
                self.info.first_ts = self._now()
        m = _UPDATED.match(line)
        if m:
            local = _local(m.group(1))
            if local is not None:
                self._end = (local - self._offset).replace(tzinfo=timezone.utc)

    def __iter__(self) -> Iterator[Item]:
        self.info.notes.append("opencode markdown exports have no time per message: "
                               "times are estimated from the start and reply durations")
        lines = read_lines(self.fh)
        tool: tuple[int, str] | None = None
        header = True
        for num, raw in lines:
            self.info.lines = num
            if raw is None:
                yield Skipped(num, "line too long (raise HARNESS_IMPORT_MAX_LINE)", True)
                continue
            if binary_line(raw):
                yield Skipped(num, BINARY_LINE)  # a hexdump or a binary in tool output
                continue
            line = raw.decode("utf-8", "replace")
            if header:
                if line.startswith("## "):
                    header = False
                else:
                    self._header(line)
                    continue
            if line.startswith("## "):
                tool = None
                m = _ASSISTANT.match(line)
                if m and m.group(1):
                    value = float(m.group(1))
                    unit = m.group(2)
                    self._elapsed += timedelta(seconds=value / 1000 if unit == "ms" else
                                               value * 60 if unit == "m" else value)
                continue
            m = _TOOL.match(line)
            if m:
                if tool is not None:
                    yield Skipped(tool[0], "todowrite without its **Input:** block", True)
                tool = (num, m.group(1)) if m.group(1).lower() == "todowrite" else None
                if tool is None:
                    self.non_todo += 1
                continue
            if tool is not None and line.startswith("```"):
                start = tool[0]
                tool = None
                yield self._fenced(start, lines)
        if tool is not None:
            yield Skipped(tool[0], "todowrite without its **Input:** block", True)

    def _fenced(self, start: int, lines: Iterator[tuple[int, bytes | None]]) -> Item:
        body: list[bytes] = []
        for num, raw in lines:
            self.info.lines = num
            if raw is None:
                return Skipped(start, "line too long in a todowrite input", True)
            if raw.startswith(b"```"):
                break
            body.append(raw)
        else:
            return Skipped(start, "todowrite input block not closed (truncated file?)", True)
        self._calls += 1
        ref = f"{self.info.session_hint or 'opencode'}#todowrite{self._calls}"
        try:
            payload = json.loads(b"\n".join(body))
        except (ValueError, RecursionError) as exc:
            return Skipped(start, json_error(exc), True)
        try:
            write = parse(payload, "opencode", f"{self.where}:{start}")
        except InputError as exc:
            return Skipped(start, f"todowrite: {exc.message}", True)
        return Call(line=start, ts=self._now(), ref=ref, key=f"opencode:{ref}",
                    tool="todowrite", write=write)
