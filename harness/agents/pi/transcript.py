"""pi's sessions: ``~/.pi/agent/sessions/--<cwd with / as ->--/<time>_<uuid>.jsonl``.

The first line is the header, ``{"type": "session", "version": 3, "id", "timestamp",
"cwd"}``; each other line is an entry (``id``, ``parentId``, ``timestamp``). A todo call
is a ``message`` entry whose ``message`` is the assistant's (``role`` ``assistant``) with
``{"type": "toolCall", "id", "name": "todowrite", "arguments": {"todos": [...]}}`` in its
``content``, in the shape of the harness's extension (``{content, status, priority}``);
its result is a later ``message`` entry with ``role`` ``toolResult``, the same
``toolCallId`` and ``isError``. A call whose result is an error changed nothing, and is
skipped. pi keeps a session's branches (``/tree``) in one file: calls are read in the
file's order, whichever branch they are on.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import IO, Any

from harness.agents.transcripts import Call, Item, Parser, Skipped, to_ts
from harness.errors import InputError
from harness.formats import parse

TOOL = "todowrite"
_META_LINES = 3


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


class PiSessionParser(Parser):
    fmt = "pi-session"

    def __init__(self, fh: IO[bytes], where: str, *, fallback_ts: str | None = None):
        super().__init__(fh, where, fallback_ts=fallback_ts)
        # call id -> (line, time, arguments)
        self._pending: OrderedDict[str, tuple[int, str | None, Any]] = OrderedDict()

    def __iter__(self) -> Iterator[Item]:
        def wanted(num: int, raw: bytes) -> bool:
            return num <= _META_LINES or TOOL.encode() in raw

        for got in self._json_lines(wanted):
            if isinstance(got, Skipped):
                yield got
                continue
            num, obj = got
            yield from self._entry(num, obj)
        for call_id, (line, ts, args) in self._pending.items():
            # No result written (pi stopped mid-call): the extension wrote it before.
            yield from self._call(line, call_id, ts, args)

    def _entry(self, num: int, obj: dict[str, Any]) -> Iterator[Item]:
        ts = to_ts(obj.get("timestamp"))
        self._saw_ts(ts)
        if obj.get("type") == "session":
            sid = obj.get("id")
            if isinstance(sid, str) and self.info.session_hint is None:
                self.info.session_hint = sid
            self.non_todo += 1
            return
        msg = obj.get("message") if obj.get("type") == "message" else None
        if not isinstance(msg, dict):
            self.non_todo += 1
            return
        role = msg.get("role")
        if role == "assistant":
            found = False
            for block in msg.get("content") if isinstance(msg.get("content"), list) else []:
                if isinstance(block, dict) and block.get("type") == "toolCall" \
                        and block.get("name") == TOOL:
                    found = True
                    call_id = str(block.get("id") or f"line{num}")
                    self._pending[call_id] = (num, ts or self._last_ts, block.get("arguments"))
            if not found:
                self.non_todo += 1
            return
        if role == "toolResult" and str(msg.get("toolCallId")) in self._pending:
            call_id = str(msg.get("toolCallId"))
            line, when, args = self._pending.pop(call_id)
            if msg.get("isError"):
                yield Skipped(line, f"todowrite refused ({_text(msg.get('content'))[:60]})")
                return
            yield from self._call(line, call_id, when, args)
            return
        self.non_todo += 1

    def _call(self, line: int, call_id: str, ts: str | None, args: Any) -> Iterator[Item]:
        if not isinstance(args, dict):
            yield Skipped(line, f"{TOOL} {call_id}: arguments are not an object", True)
            return
        try:
            write = parse({"todos": args.get("todos")}, "opencode", f"{self.where}:{line}")
        except InputError as exc:
            yield Skipped(line, f"{TOOL} {call_id}: {exc.message}", True)
            return
        yield Call(line=line, ts=ts or self.fallback_ts, ref=call_id, key=f"pi:{call_id}",
                   tool=TOOL, write=write)
