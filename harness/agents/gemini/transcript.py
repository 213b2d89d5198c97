"""Gemini CLI's saved chats and checkpoints.

**Chats** (``gemini-chat``): Gemini CLI records every session under
``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl`` (``--resume`` reads them):
a first line ``{sessionId, projectHash, startTime, lastUpdated, kind}``, then one record
a line: a message ``{id, timestamp, type: "user"|"gemini"|..., content, ...}`` (a message
written again, with the same ``id``, once its tool calls are known), a metadata update
``{"$set": {...}}`` (``{"$set": {"messages": [...]}}`` writes the whole history again,
after a compression or on a resume) or ``{"$rewindTo": id}``. A ``gemini`` message
holds the calls it made: ``toolCalls: [{id, name, args, result: [{functionResponse:
{response: {output} | {error}}}], status: "success"|"error"|"cancelled", timestamp}]``.
Older versions wrote the same as one JSON document, ``session-*.json``:
``{sessionId, projectHash, startTime, lastUpdated, messages: [...]}``.

**Checkpoints** (``gemini-checkpoint``): ``/chat save TAG`` writes
``~/.gemini/tmp/<project>/checkpoint-<TAG>.json``, the conversation as the model saw it:
``{history: [{role, parts}], authType}`` (older: the bare list), a call being a model part
``{functionCall: {id, name, args}}`` answered by a user part ``{functionResponse: {id,
name, response: {output} | {error}}}``. A checkpoint of a file-changing tool call
(``general.checkpointing``; ``checkpoints/*.json``) holds the same list as
``clientHistory``. A checkpoint has no times (the file's is used) and no session id (its
file name stands for one).

A todo call is ``write_todos {todos: [{description, status}]}`` (Gemini 2 models), merged
as a whole list, or a call of the task tracker (``tracker_create_task``,
``tracker_update_task``, ``tracker_add_dependency``), applied as the live hook applies it
(:func:`harness.agents.gemini.tracker.apply`), so statuses and dependencies land the same
way. A call the tool refused changed nothing, and is skipped; a call seen again (the
history written anew) counts once, by its call id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import IO, Any

import ijson

from harness.agents.gemini.hooks import WRITE_TODOS
from harness.agents.gemini.tracker import WRITE_TOOLS
from harness.agents.gemini.tracker import apply as tracker_apply
from harness.agents.transcripts import Call, Item, Parser, Skipped, to_ts
from harness.errors import InputError
from harness.formats import parse

TOOLS = frozenset({WRITE_TODOS, *WRITE_TOOLS})
_MARKERS = tuple(f'"{t}"'.encode() for t in sorted(TOOLS))
_META_LINES = 5


def _texts(value: Any) -> Iterator[str]:
    """Every string inside a call's arguments (for the NUL check)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def _response(value: Any) -> tuple[str, bool]:
    """(what the tool told the model, whether it failed) from a ``functionResponse``'s
    ``response`` (``{output}`` or ``{error}``), or a list of function-response parts."""
    if isinstance(value, list):
        for part in value:
            fr = part.get("functionResponse") if isinstance(part, Mapping) else None
            if isinstance(fr, Mapping):
                return _response(fr.get("response"))
        return "", False
    if not isinstance(value, Mapping):
        return "", False
    if value.get("error"):
        return str(value["error"]), True
    output = value.get("output")
    return (output if isinstance(output, str) else ""), False


class _Calls(Parser):
    """What both formats share: one tool call in, a :class:`Call` (or a skip) out."""

    def __init__(self, fh: IO[bytes], where: str, *, fallback_ts: str | None = None):
        super().__init__(fh, where, fallback_ts=fallback_ts)
        self._seen: set[str] = set()

    def _call(self, line: int, call_id: str, name: str, args: Any, result: str,
              refused: str | None, ts: str | None, gemini_session: str) -> Iterator[Item]:
        """One call; ``refused`` says why it changed nothing (None: it ran)."""
        if call_id in self._seen:
            return
        self._seen.add(call_id)
        self._saw_ts(ts)
        when = ts or self._last_ts or self.fallback_ts
        if refused is not None:
            yield Skipped(line, f"{name} {refused}")
            return
        if not isinstance(args, Mapping):
            yield Skipped(line, f"{name} {call_id}: arguments are not an object", True)
            return
        key = f"gemini:{call_id}"
        if name == WRITE_TODOS:
            try:
                write = parse(dict(args), "gemini", f"{self.where}:{line}")
            except InputError as exc:
                yield Skipped(line, f"{name} {call_id}: {exc.message}", True)
                return
            yield Call(line=line, ts=when, ref=call_id, key=key, tool=name, write=write)
            return
        yield Call(line=line, ts=when, ref=call_id, key=key, tool=name, write=None,
                   apply=partial(_tracker, name=name, args=dict(args), result=result,
                                 session=gemini_session, ts=when, ref=call_id),
                   texts=tuple(_texts(args)))

    def _record(self, line: int, msg: Any, gemini_session: str) -> Iterator[Item]:
        """The todo calls of one chat message record."""
        if not isinstance(msg, Mapping):
            return
        ts = to_ts(msg.get("timestamp"))
        calls = msg.get("toolCalls")
        found = False
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, Mapping) or call.get("name") not in TOOLS:
                continue
            status = call.get("status")
            if status not in ("success", "error", "cancelled"):
                continue  # still running when written: its final record comes later
            found = True
            result, failed = _response(call.get("result"))
            refused = ("cancelled before it ran" if status == "cancelled"
                       else _refused(result) if failed or status == "error" else None)
            yield from self._call(line, str(call.get("id") or f"line{line}"), call["name"],
                                  call.get("args"), result, refused,
                                  to_ts(call.get("timestamp")) or ts, gemini_session)
        if not found:
            self.non_todo += 1

    def _contents(self, contents: Iterator[Any], session: str) -> Iterator[Item]:
        """The todo calls of a conversation as the model saw it (``[{role, parts}]``, read
        one content at a time): each model ``functionCall`` is applied when the
        ``functionResponse`` that answered it comes (one never answered, at the end)."""
        pending: dict[str, tuple[int, str, Any]] = {}  # call id -> (content no., name, args)
        for n, content in enumerate(contents, 1):
            parts = content.get("parts") if isinstance(content, Mapping) else None
            found = False
            for part in parts if isinstance(parts, list) else []:
                if not isinstance(part, Mapping):
                    continue
                fc, fr = part.get("functionCall"), part.get("functionResponse")
                if isinstance(fc, Mapping) and fc.get("name") in TOOLS:
                    found = True
                    pending[str(fc.get("id") or f"{session}:{n}")] = (n, fc["name"],
                                                                     fc.get("args"))
                elif isinstance(fr, Mapping) and str(fr.get("id")) in pending:
                    found = True
                    call_id = str(fr.get("id"))
                    line, name, args = pending.pop(call_id)
                    result, failed = _response(fr.get("response"))
                    yield from self._call(line, call_id, name, args, result,
                                          _refused(result) if failed else None, None, session)
            if not found:
                self.non_todo += 1
        for call_id, (line, name, args) in pending.items():
            yield from self._call(line, call_id, name, args, "", None, None, session)


def _refused(error: str) -> str:
    return f"refused by Gemini CLI ({error[:60]})"


def _tracker(tx: Any, *, name: str, args: dict[str, Any], result: str, session: str,
             ts: str | None, ref: str) -> None:
    tracker_apply(tx, name, args, result, session, ts=ts, ref=ref)


class GeminiChatParser(_Calls):
    fmt = "gemini-chat"

    def __iter__(self) -> Iterator[Item]:
        first = self.fh.readline().strip()
        self.fh.seek(0)
        try:
            whole = isinstance(json.loads(first), dict) if first else False
        except (ValueError, RecursionError):
            whole = False
        yield from (self._lines() if whole else self._document())

    def _header(self, obj: Mapping[str, Any]) -> None:
        sid = obj.get("sessionId")
        if isinstance(sid, str) and self.info.session_hint is None:
            self.info.session_hint = sid
        self._saw_ts(to_ts(obj.get("startTime")))

    def _lines(self) -> Iterator[Item]:
        def wanted(num: int, raw: bytes) -> bool:
            return num <= _META_LINES or any(m in raw for m in _MARKERS)

        for got in self._json_lines(wanted):
            if isinstance(got, Skipped):
                yield got
                continue
            num, obj = got
            if "sessionId" in obj and "projectHash" in obj:
                self._header(obj)
                self.non_todo += 1
                continue
            update = obj.get("$set")
            if isinstance(update, Mapping) and isinstance(update.get("messages"), list):
                for msg in update["messages"]:  # the history written again: seen calls
                    yield from self._record(num, msg, self._session())  # count once
                continue
            yield from self._record(num, obj, self._session())

    def _session(self) -> str:
        return self.info.session_hint or Path(self.where).stem

    def _document(self) -> Iterator[Item]:
        try:
            for prefix, event, value in ijson.parse(self.fh):
                if prefix == "messages" and event == "start_array":
                    break
                if prefix in ("sessionId", "startTime") and event == "string":
                    self._header({prefix: value})
            self.fh.seek(0)
            for index, msg in enumerate(ijson.items(self.fh, "messages.item",
                                                    use_float=True), 1):
                yield from self._record(index, msg, self._session())
        except ijson.JSONError as exc:
            yield Skipped(None, f"malformed JSON ({_first(exc)}); read up to there", True)


class GeminiCheckpointParser(_Calls):
    fmt = "gemini-checkpoint"

    def __iter__(self) -> Iterator[Item]:
        session = Path(self.where).stem
        self.info.session_hint = session
        try:
            keys: set[str] = set()
            for prefix, event, value in ijson.parse(self.fh):
                if prefix == "" and event == "map_key":
                    keys.add(value)
                elif prefix == "" and event == "start_array":
                    break  # the bare list of an older checkpoint
            self.fh.seek(0)
            where = ("clientHistory.item" if "clientHistory" in keys
                     else "history.item" if "history" in keys else "item")
            if keys and where == "item":
                yield Skipped(None, "no conversation found (expected history or "
                                    "clientHistory: a list of {role, parts})", True)
                return
            yield from self._contents(ijson.items(self.fh, where, use_float=True), session)
        except ijson.JSONError as exc:
            yield Skipped(None, f"malformed JSON ({_first(exc)}); read up to there", True)


def _first(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
