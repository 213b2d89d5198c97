"""GitHub Actions logs of ``anthropics/claude-code-action``: where many teams' Claude Code
runs live.

Such a log starts with the step's header and the action's inputs (``Run
anthropics/claude-code-action@v1``, ``with:`` and one line per input), then the action's
own lines (``Running Claude with prompt from file: ...``, ``SDK options: {...}``), then
every stream-json message Claude Code sends, printed by ``JSON.stringify(message, null,
2)``: one message over many lines, from a ``{`` alone in the first column to its closing
``}``. A log downloaded from GitHub has the runner's timestamp before every line
(``2026-05-04T10:21:07.1234567Z ``); one copied from the web page has none. Both are read.

The messages are Claude Code's (``system``/``assistant``/``user``/``result``), so the
calls in them are read as :class:`harness.agents.claude.transcript.ClaudeParser` reads a
stream-json file; a message's time is its line's timestamp, when the log has them.
Lines that are neither the action's nor JSON are counted, never refused. Without the
action's ``show_full_output: true`` only the init and result messages are printed: the
summary says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from harness.agents.claude.transcript import ClaudeParser, _depth
from harness.agents.transcripts import BINARY_LINE, Skipped, json_error, read_lines

_STAMP = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) ")
_HIDDEN = b"full output hidden"


class ClaudeActionParser(ClaudeParser):
    fmt = "claude-action"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, stream=True, **kwargs)
        self.fmt = "claude-action"
        self._hidden = False

    def _values(self) -> Iterator[tuple[int, Any] | Skipped]:
        buf: list[bytes] = []
        start = 0
        depth = 0
        stamp: str | None = None
        for num, raw in read_lines(self.fh):
            self.info.lines = num
            if raw is None:
                yield Skipped(num, "line too long (raise HARNESS_IMPORT_MAX_LINE)", True)
                buf, depth = [], 0
                continue
            m = _STAMP.match(raw)
            ts = m.group(1).decode() if m else None
            if m:
                raw = raw[m.end():]
            if b"\x00" in raw:
                yield Skipped(num, BINARY_LINE)
                continue
            if raw.startswith(b"##["):
                self.non_todo += 1  # the runner's own markers (groups, warnings)
                continue
            if not buf:
                if raw.rstrip() == b"{":
                    buf, start, depth, stamp = [raw], num, 1, ts
                    continue
                body = raw.rstrip()
                if body.startswith(b"{") and body.endswith(b"}"):
                    yield from self._parse(num, body, ts)  # a message on one line
                    continue
                if _HIDDEN in raw:
                    self._hidden = True
                self.non_todo += 1  # the inputs and the action's own lines
                continue
            buf.append(raw)
            depth += _depth(raw)
            if depth <= 0:
                text = b"\n".join(buf)
                buf, depth = [], 0
                yield from self._parse(start, text, stamp)
        if buf:
            yield Skipped(start, "truncated JSON value at the end of the log", True)
        if self._hidden:
            self.info.notes.append(
                "the action ran without `show_full_output: true`: its log shows only the "
                "init and result messages, so no todo calls could be read from it")

    def _parse(self, num: int, text: bytes, ts: str | None) -> Iterator[tuple[int, Any] | Skipped]:
        try:
            obj = json.loads(text)
        except UnicodeDecodeError:
            yield Skipped(num, BINARY_LINE)
            return
        except (ValueError, RecursionError) as exc:
            yield Skipped(num, json_error(exc), True)
            return
        if ts is not None and isinstance(obj, dict) and "timestamp" not in obj:
            obj["timestamp"] = ts
        yield num, obj
