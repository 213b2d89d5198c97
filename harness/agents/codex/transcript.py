"""Codex CLI rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``.

Each line is ``{timestamp, type, payload}``. The first is ``session_meta`` (its payload
has the session ``id``); a plan call is ``type: response_item`` whose payload is
``{type: "function_call", name: "update_plan", arguments, call_id}``, with
``arguments`` a JSON-encoded string ``{explanation?, plan: [{step, status}]}``. Its
answer is a ``function_call_output`` with the same ``call_id``; an answer that says the
arguments failed to parse, or that the tool is not there ("unsupported call: update_plan",
Codex's answer while ``[tools.update_plan]`` is not enabled), means the plan did not
change, and the call is skipped (:func:`harness.agents.codex.watch.refusal`; ``harness watch-codex`` and the hooks
agree).
Older rollouts wrote the items bare (no ``{timestamp, type, payload}`` wrapper) after a
first ``{id, timestamp}`` line; those are read too, at the session's time.

As for Claude Code, only lines that can hold a plan call (or its answer) are parsed in
full; the others are checked for shape.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import IO, Any

from harness.agents.codex.watch import refusal
from harness.agents.transcripts import (
    Call,
    Item,
    Parser,
    Skipped,
    to_ts,
)
from harness.errors import InputError
from harness.formats import parse

_META_LINES = 20
_MAX_PENDING = 64



class CodexParser(Parser):
    fmt = "codex"

    def __init__(self, fh: IO[bytes], where: str, *, fallback_ts: str | None = None):
        super().__init__(fh, where, fallback_ts=fallback_ts)
        # call_id -> [line, ts, arguments, answered, refused]
        self._pending: OrderedDict[str, list[Any]] = OrderedDict()
        self._seen: set[str] = set()

    def __iter__(self) -> Iterator[Item]:
        def wanted(num: int, raw: bytes) -> bool:
            return (num <= _META_LINES or b'"update_plan"' in raw
                    or bool(self._pending and any(k.encode() in raw for k in self._pending)))

        for got in self._json_lines(wanted):
            if isinstance(got, Skipped):
                yield got
                continue
            num, obj = got
            self._line(num, obj)
            yield from self._flush()
        yield from self._flush(force=True)

    def _line(self, num: int, obj: dict[str, Any]) -> None:
        ts = to_ts(obj.get("timestamp"))
        self._saw_ts(ts)
        kind = obj.get("type")
        payload = obj.get("payload") if isinstance(obj.get("payload"), dict) else obj
        if kind == "session_meta" or (num == 1 and "id" in obj and "payload" not in obj):
            sid = payload.get("id") or payload.get("session_id")
            if isinstance(sid, str) and self.info.session_hint is None:
                self.info.session_hint = sid
            self.non_todo += 1
            return
        ptype = payload.get("type")
        if ptype == "function_call" and payload.get("name") == "update_plan":
            cid = str(payload.get("call_id") or payload.get("id") or f"line{num}")
            if cid in self._seen:
                return
            self._seen.add(cid)
            self._pending[cid] = [num, ts or self._last_ts, payload.get("arguments"), False,
                                  None]
            return
        if ptype == "function_call_output":
            entry = self._pending.get(str(payload.get("call_id")))
            if entry is not None:
                entry[3] = True
                entry[4] = refusal(payload.get("output"))
                return
        self.non_todo += 1

    def _flush(self, force: bool = False) -> Iterator[Item]:
        while self._pending:
            cid, (num, ts, args, answered, refused) = next(iter(self._pending.items()))
            if not (answered or force or len(self._pending) > _MAX_PENDING):
                return
            del self._pending[cid]
            if refused:
                yield Skipped(num, f"update_plan refused by the tool ({refused})")
                continue
            where = f"{self.where}:{num}"
            try:
                write = parse({"arguments": args} if isinstance(args, str) else args,
                              "codex", where)
            except InputError as exc:
                yield Skipped(num, f"update_plan: {exc.message}", True)
                continue
            yield Call(line=num, ts=ts or self.fallback_ts, ref=cid, key=f"codex:{cid}",
                       tool="update_plan", write=write)
