"""opencode's JSON: ``opencode export <id>``, its storage files, and ``--format json`` events.

``opencode export`` prints ``{info: Session, messages: [{info: Message, parts: [Part]}],
todos}``, pretty-printed. A todo call is a part ``{type: "tool", tool: "todowrite",
callID, state: {status, input: {todos}, time: {start, end}}}`` (times in epoch ms). The
same part objects are what opencode keeps in ``storage/part/<message>/<part>.json`` and
what ``opencode run --format json`` streams (inside ``{type, timestamp, part}`` events),
so all three are read the same way: every tool part named ``todowrite`` is a call.

The export is one JSON document; it is parsed incrementally (ijson), a message at a
time, so a huge export is read in bounded memory. A part whose tool ended in ``error``
changed nothing and is skipped; a call seen again (a streamed part updated from
``running`` to ``completed``) counts once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import ijson

from harness.agents.transcripts import Call, Item, Parser, Skipped, to_ts
from harness.errors import InputError
from harness.formats import parse

TOOL = "todowrite"


class OpencodeJsonParser(Parser):
    fmt = "opencode-json"

    def __init__(self, fh: IO[bytes], where: str, *, fallback_ts: str | None = None):
        super().__init__(fh, where, fallback_ts=fallback_ts)
        self._seen: set[str] = set()

    def _is_export(self) -> bool:
        # An export document starts with its session's "info" object.
        try:
            for prefix, event, _value in ijson.parse(self.fh):
                if prefix == "" and event == "map_key":
                    return _value == "info"
                if prefix == "" and event != "start_map":
                    return False
            return False
        except ijson.JSONError:
            return False
        finally:
            self.fh.seek(0)

    def __iter__(self) -> Iterator[Item]:
        try:
            if self._is_export():
                yield from self._export()
            else:
                for index, value in enumerate(ijson.items(self.fh, "", multiple_values=True,
                                                          use_float=True), 1):
                    yield from self._walk(value, index, None)
        except ijson.IncompleteJSONError as exc:
            yield Skipped(None, f"truncated JSON ({_first(exc)}); read up to there", True)
        except ijson.JSONError as exc:
            yield Skipped(None, f"malformed JSON ({_first(exc)}); read up to there", True)

    def _export(self) -> Iterator[Item]:
        for info in ijson.items(self.fh, "info", use_float=True):
            if isinstance(info, dict):
                self.info.session_hint = info.get("id") or self.info.session_hint
                times = info.get("time") if isinstance(info.get("time"), dict) else {}
                self.info.first_ts = to_ts(times.get("created"))
            break
        self.fh.seek(0)
        for index, msg in enumerate(ijson.items(self.fh, "messages.item", use_float=True), 1):
            minfo = msg.get("info") if isinstance(msg, dict) else None
            created = None
            if isinstance(minfo, dict) and isinstance(minfo.get("time"), dict):
                created = to_ts(minfo["time"].get("created"))
            parts = msg.get("parts") if isinstance(msg, dict) else None
            found = False
            for part in parts if isinstance(parts, list) else []:
                for item in self._part(part, index, created):
                    found = True
                    yield item
            if not found:
                self.non_todo += 1

    def _walk(self, value: Any, index: int, ts: str | None) -> Iterator[Item]:
        """Any value: an event ``{type, timestamp, part}``, a part, a message with parts."""
        if isinstance(value, dict):
            here = to_ts(value.get("timestamp")) or ts
            if value.get("type") == "tool" and "state" in value:
                yield from self._part(value, index, here)
                return
            if self.info.session_hint is None:
                sid = value.get("sessionID")
                if isinstance(sid, str):
                    self.info.session_hint = sid
            found = False
            for child in value.values():
                if isinstance(child, (dict, list)):
                    for item in self._walk(child, index, here):
                        found = True
                        yield item
            if not found and ts is None:
                self.non_todo += 1
        elif isinstance(value, list):
            for child in value:
                yield from self._walk(child, index, ts)

    def _part(self, part: Any, index: int, ts: str | None) -> Iterator[Item]:
        if not (isinstance(part, dict) and part.get("type") == "tool"
                and part.get("tool") == TOOL):
            return
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        ref = str(part.get("callID") or part.get("id") or f"value{index}")
        if ref in self._seen:
            return
        if self.info.session_hint is None and isinstance(part.get("sessionID"), str):
            self.info.session_hint = part["sessionID"]
        where = f"{self.where}: value {index} (part {ref})"
        status = state.get("status")
        if status == "error":
            self._seen.add(ref)
            yield Skipped(None, f"todowrite {ref} ended in error "
                                f"({str(state.get('error', ''))[:60]})")
            return
        inp = state.get("input")
        if not isinstance(inp, dict) or "todos" not in inp:
            if status in ("pending", "running"):
                return  # streamed before its input arrived; a later update carries it
            yield Skipped(None, f"todowrite {ref} without input", True)
            return
        self._seen.add(ref)
        times = state.get("time") if isinstance(state.get("time"), dict) else {}
        when = to_ts(times.get("start")) or to_ts(times.get("end")) or ts or self._last_ts
        self._saw_ts(when)
        try:
            write = parse(inp, "opencode", where)
        except InputError as exc:
            yield Skipped(None, f"todowrite {ref}: {exc.message}", True)
            return
        yield Call(line=index, ts=when or self.fallback_ts, ref=ref, key=f"opencode:{ref}",
                   tool=TOOL, write=write)


def _first(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
