"""What every importer shares: the items a parser yields, and reading files safely.

A parser reads one file and yields, in order:

* :class:`Call` - one agent todo call, as the :class:`~harness.formats.AgentWrite` it
  amounts to (or, for a call that changes one item, such as Gemini CLI's tracker, the
  change itself as the agent's live hook makes it), with its original time and a ``ref``
  back to the source (tool-call id);
* :class:`Skipped` - something it did not import and why (``malformed`` ones are warned
  about with their line number; a line that is simply not a todo call is only counted).

Files are read as bytes, a line at a time, with a cap on one line's length, so memory
stays bounded whatever the file's size.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from harness.errors import InputError
from harness.formats import AgentWrite
from state.errors import StoreError
from state.store import Tx, normalize_ts

DEFAULT_MAX_LINE = 64 * 1024 * 1024
HEAD_BYTES = 64 * 1024


def max_line_bytes() -> int:
    try:
        return int(os.environ.get("HARNESS_IMPORT_MAX_LINE", DEFAULT_MAX_LINE))
    except ValueError:
        return DEFAULT_MAX_LINE


@dataclass
class Call:
    line: int
    ts: str | None
    ref: str
    key: str  # idempotency: the same source item always has the same key
    tool: str
    write: AgentWrite | None  # the whole list the call leaves (None: ``apply`` does it)
    # A call that changes one item: applied inside the import's transaction.
    apply: Callable[[Tx], object] | None = None
    texts: tuple[str, ...] = ()  # an ``apply`` call's texts (checked for NUL)


@dataclass
class Skipped:
    line: int | None
    reason: str
    malformed: bool = False


Item = Call | Skipped


@dataclass
class SourceInfo:
    """What a parser learnt about the source as it read (filled in as it goes)."""

    session_hint: str | None = None  # the agent's own session id
    first_ts: str | None = None
    notes: list[str] = field(default_factory=list)
    lines: int = 0


class Parser:
    """What every transcript parser holds: the file, where it is (for messages), what it
    learnt, the timestamps to fall back on, and how many lines were not todo calls."""

    fmt = ""

    def __init__(self, fh: IO[bytes], where: str, *, fallback_ts: str | None = None):
        self.fh = fh
        self.where = where
        self.info = SourceInfo()
        self.fallback_ts = fallback_ts
        self.non_todo = 0
        self._last_ts: str | None = None  # the latest read, for entries that carry none

    def _json_lines(self, wanted: Callable[[int, bytes], bool]
                    ) -> Iterator[tuple[int, dict[str, Any]] | Skipped]:
        """(line number, object) for each JSONL line ``wanted`` picks (by its raw bytes:
        parsing every line in full would cost most of an import); the others, and values
        that are not objects, are only checked for shape and counted. Bad lines come out
        as :class:`Skipped`."""
        for num, raw in read_lines(self.fh):
            self.info.lines = num
            if raw is None:
                yield Skipped(num, "line too long (raise HARNESS_IMPORT_MAX_LINE)", True)
                continue
            body = raw.strip()
            if not body:
                continue
            if b"\x00" in raw:
                yield Skipped(num, BINARY_LINE)  # raw NUL: never a JSON line
                continue
            if not wanted(num, raw):
                if not (body.startswith(b"{") and body.endswith(b"}")):
                    yield Skipped(num, "truncated or not a JSON object", True)
                else:
                    self.non_todo += 1
                continue
            try:
                obj = json.loads(raw)
            except UnicodeDecodeError:
                yield Skipped(num, BINARY_LINE)
                continue
            except (ValueError, RecursionError) as exc:
                yield Skipped(num, json_error(exc), True)
                continue
            if isinstance(obj, dict):
                yield num, obj
            else:
                self.non_todo += 1

    def _saw_ts(self, ts: str | None) -> None:
        """Note a timestamp read from the source: the latest, and the first of the file."""
        if ts is not None:
            self._last_ts = ts
            if self.info.first_ts is None:
                self.info.first_ts = ts


def check_text(head: bytes, where: str) -> None:
    """Refuse what cannot be read as UTF-8 text at all. NUL or undecodable bytes are not
    refused here: transcripts hold them inside tool output (a hexdump of a binary), and
    the lines that do are skipped and counted; a file in no known format is refused by
    :func:`harness.importers.detect.detect`."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError("UTF-16 text is not supported (expected UTF-8)", where=where,
                         hint="convert it, e.g. `iconv -f UTF-16 -t UTF-8`")


BINARY_LINE = "lines with NUL or undecodable bytes (binary tool output)"


def binary_line(raw: bytes) -> bool:
    """Whether a line holds bytes no JSON or text of a transcript can: NUL (never valid,
    even inside a JSON string, where it must be escaped), or bytes that are not UTF-8."""
    if b"\x00" in raw:
        return True
    if raw.isascii():
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def read_lines(fh: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes without the newline) for each line; ``None`` for a line over
    the length cap, which is skipped without being held in memory."""
    cap = max_line_bytes()
    num = 0
    while True:
        line = fh.readline(cap + 1)
        if not line:
            return
        num += 1
        if len(line) > cap and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = fh.readline(1 << 20)
            yield num, None
            continue
        # Only copy the line when it ends in a newline to strip (json.loads would not
        # mind it, but the shape checks and the markdown reader would).
        yield num, (line[:-2] if line.endswith(b"\r\n") else
                    line[:-1] if line.endswith(b"\n") else line)


def to_ts(value: Any) -> str | None:
    """A source's timestamp (ISO text, epoch seconds or ms) -> ours, or None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return None
    try:
        return normalize_ts(value)
    except (StoreError, ValueError, OverflowError, OSError, TypeError):
        return None


_WS = re.compile(rb"\s+")


def preview(raw: bytes, width: int = 60) -> str:
    text = _WS.sub(b" ", raw[: width * 4]).decode("utf-8", "replace")
    return text[:width] + ("…" if len(text) > width else "")


def json_error(exc: ValueError | RecursionError) -> str:
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    msg = getattr(exc, "msg", None) or str(exc).split(":")[0]
    col = getattr(exc, "colno", None)
    return f"malformed JSON ({msg}" + (f" at column {col})" if col else ")")


@dataclass
class ImportReport:
    """What one file's import did: the summary ``harness import`` prints."""

    path: str
    format: str = ""
    session: str | None = None
    session_created: bool = False
    calls: int = 0  # todo calls found in the file
    imported: int = 0  # ... applied now
    already: int = 0  # ... imported before (idempotent re-import)
    events: int = 0
    first_ts: str | None = None
    last_ts: str | None = None
    non_todo: int = 0  # lines or values that are not todo calls
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    malformed: list[tuple[int | None, str]] = field(default_factory=list)
    malformed_count: int = 0
    notes: list[str] = field(default_factory=list)
    already_in: str | None = None

    MAX_KEPT = 1000

    def skip(self, item: Skipped) -> None:
        if item.malformed:
            self.malformed_count += 1
            if len(self.malformed) < self.MAX_KEPT:
                self.malformed.append((item.line, item.reason))
        else:
            self.skipped[item.reason] = self.skipped.get(item.reason, 0) + 1

    def skip_reason(self, reason: str, malformed: bool = False) -> None:
        self.skip(Skipped(None, reason, malformed))

    def saw(self, ts: str | None) -> None:
        if ts is None:
            return
        if self.first_ts is None or ts < self.first_ts:
            self.first_ts = ts
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "format": self.format, "session": self.session,
            "session_created": self.session_created, "todo_calls": self.calls,
            "imported": self.imported, "already_imported": self.already,
            "already_in": self.already_in, "events": self.events,
            "first_ts": self.first_ts, "last_ts": self.last_ts,
            "not_todo_calls": self.non_todo, "skipped": self.skipped,
            "malformed": [{"line": ln, "reason": r} for ln, r in self.malformed],
            "malformed_count": self.malformed_count, "notes": self.notes,
        }
