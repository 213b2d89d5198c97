"""Claude Code transcripts: the session JSONL files and ``--output-format stream-json``.

Both hold ``message.content[]`` blocks. A todo call is a ``tool_use`` block named
``TodoWrite`` (v1: ``{id, content, status, priority}``; v2: ``{content, status,
activeForm}``), or one of the per-task tools of Claude Code >= 2.1.142: ``TaskCreate
{subject, description, activeForm}``, ``TaskUpdate {taskId, status|subject|...}``
(``status: "deleted"`` removes) and ``TaskList``, whose result is the whole list. The
task tools change one task at a time; we keep the agent's list as it goes and import
each call as the full list it leaves, so it merges like any other write.

A call is applied when its ``tool_result`` arrives (or at the end of the file): a call
the tool refused (``is_error``) changed nothing in the agent's list, and is skipped.
A ``TodoWrite`` result without its call (a line lost) is imported from the result's
``toolUseResult.newTodos``. Calls of a subagent (``isSidechain``) keep their own list in
Claude Code; in a file that also has the main thread they are skipped.

Only lines that can hold a todo call (or the result of one we wait for) are parsed in
full; the others are checked for shape (one JSON object a line) and counted. That keeps
an import about as fast as reading the file.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from harness.agents.transcripts import (
    BINARY_LINE,
    Call,
    Parser,
    Skipped,
    json_error,
    read_lines,
    to_ts,
)
from harness.agents.transcripts import (
    Item as ParsedItem,
)
from harness.errors import InputError
from harness.formats import CLAUDE_TASKS, AgentWrite, Item, parse

TOOLS = frozenset({"TodoWrite", "TaskCreate", "TaskUpdate", "TaskList"})
_MARKERS = (b'"TodoWrite"', b'"TaskCreate"', b'"TaskUpdate"', b'"TaskList"', b'"newTodos"')
_TASK_NO = re.compile(r"#\s*(\d+)")
_TASK_LINE = re.compile(r"^\s*#?(\d+)\.?\s*\[([A-Za-z_ ]+)\]\s*(.*?)\s*$")
_STATUSES = ("pending", "in_progress", "completed")
# A call still waiting for its result after this many later calls is applied anyway.
_MAX_PENDING = 64
_META_LINES = 50


@dataclass
class _Pending:
    line: int
    ts: str | None
    tool: str
    id: str
    input: Any
    sidechain: bool
    done: bool = False
    error: str | None = None
    result_text: str = ""
    result: Any = None


class ClaudeParser(Parser):
    """Yields :class:`Call` and :class:`Skipped` items from a Claude Code transcript."""

    def __init__(self, fh: IO[bytes], where: str, *, stream: bool = False,
                 fallback_ts: str | None = None):
        super().__init__(fh, where, fallback_ts=fallback_ts)
        self.stream = stream
        self.fmt = "claude-stream" if stream else "claude-code"
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._pending_b: list[bytes] = []  # their ids as bytes, for the line filter
        self._seen: set[str] = set()
        self._main_seen = False
        self._tasks: dict[str, list[Any]] = {}  # id -> [subject, status, activeForm]
        self._next_task = 1

    # -- reading values ---------------------------------------------------------------
    def _values(self) -> Iterator[tuple[int, Any] | Skipped]:
        if self.stream:
            yield from self._stream_values()
            return
        for num, raw in read_lines(self.fh):
            self.info.lines = num
            if raw is None:
                yield Skipped(num, "line too long (raise HARNESS_IMPORT_MAX_LINE)", True)
                continue
            if not raw.strip():
                continue
            item = self._value(num, raw)
            if item is not None:
                yield item

    def _value(self, num: int, raw: bytes) -> tuple[int, Any] | Skipped | None:
        if b"\x00" in raw:
            return Skipped(num, BINARY_LINE)  # raw NUL: never a JSON line (JSON escapes it)
        # Substring tests (memchr-fast) decide which lines need a full parse.
        wanted = (num <= _META_LINES or any(m in raw for m in _MARKERS)
                  or (self._pending and any(k in raw for k in self._pending_b)))
        if not wanted:
            if not (raw[:1] == b"{" and raw.rstrip(b" \t\r")[-1:] == b"}"):
                if raw.strip()[:1] == b"{" and raw.strip()[-1:] == b"}":
                    self.non_todo += 1  # indented, but whole
                    return None
                return Skipped(num, "truncated or not a JSON object", True)
            self.non_todo += 1
            return None
        try:
            return num, json.loads(raw)
        except UnicodeDecodeError:
            return Skipped(num, BINARY_LINE)
        except (ValueError, RecursionError) as exc:
            return Skipped(num, json_error(exc), True)

    def _stream_values(self) -> Iterator[tuple[int, Any] | Skipped]:
        """One JSON value a line, or values pretty-printed over several lines (a value
        starts with ``{`` in the first column)."""
        buf: list[bytes] = []
        start = 0
        depth = 0
        for num, raw in read_lines(self.fh):
            self.info.lines = num
            if raw is None:
                yield Skipped(num, "line too long (raise HARNESS_IMPORT_MAX_LINE)", True)
                buf, depth = [], 0
                continue
            if buf and raw.startswith((b"{", b"[")):
                yield Skipped(start, "truncated JSON value", True)
                buf, depth = [], 0
            if not buf:
                body = raw.strip()
                if not body:
                    continue
                if body.startswith(b"{") and body.endswith(b"}"):
                    item = self._value(num, raw)  # the usual case: a value on one line
                    if item is not None:
                        yield item
                    continue
                start = num
            buf.append(raw)
            depth += _depth(raw)
            if depth <= 0:
                text = b"\n".join(buf)
                buf, depth = [], 0
                try:
                    yield start, json.loads(text)
                except (ValueError, RecursionError) as exc:
                    yield Skipped(start, json_error(exc), True)
        if buf:
            yield Skipped(start, "truncated JSON value at the end of the file", True)

    # -- calls ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[ParsedItem]:
        for value in self._values():
            if isinstance(value, Skipped):
                yield value
                continue
            num, obj = value
            # A JSON array of messages: the action's execution file, an SDK dump.
            for one in obj if isinstance(obj, list) else [obj]:
                if not isinstance(one, dict):
                    self.non_todo += 1
                    continue
                self._line(num, one)
                yield from self._flush()
        yield from self._flush(force=True)

    def _line(self, num: int, obj: dict[str, Any]) -> None:
        info = self.info
        ts = to_ts(obj.get("timestamp"))
        self._saw_ts(ts)
        if info.session_hint is None:
            hint = obj.get("sessionId") or obj.get("session_id")
            if isinstance(hint, str) and hint:
                info.session_hint = hint
        kind = obj.get("type")
        msg = obj.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        sidechain = bool(obj.get("isSidechain")) or obj.get("parent_tool_use_id") is not None
        if kind in ("user", "assistant") and not sidechain:
            self._main_seen = True
        found = False
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                btype = block.get("type")
                if btype == "tool_use" and block.get("name") in TOOLS:
                    found = True
                    bid = str(block.get("id") or f"line{num}")
                    if bid in self._seen:
                        continue  # the same block written twice
                    self._seen.add(bid)
                    self._pending[bid] = _Pending(num, ts or self._last_ts, block["name"],
                                                  bid, block.get("input"), sidechain)
                    self._pending_b = [k.encode() for k in self._pending]
                elif btype == "tool_result":
                    found |= self._result(num, obj, block, ts)
        if not found:
            self.non_todo += 1

    def _result(self, num: int, obj: dict[str, Any], block: dict[str, Any],
                ts: str | None) -> bool:
        tid = str(block.get("tool_use_id") or "")
        extra = obj.get("toolUseResult", obj.get("tool_use_result"))
        p = self._pending.get(tid)
        if p is None:
            if (tid and tid not in self._seen and isinstance(extra, dict)
                    and isinstance(extra.get("newTodos"), list)):
                # The result of a TodoWrite whose call line was lost: it says the list.
                self._seen.add(tid)
                self._pending[tid] = _Pending(num, ts or self._last_ts, "TodoWrite", tid,
                                              {"todos": extra["newTodos"]}, False, done=True)
                return True
            return False
        p.done = True
        p.result_text = _text(block.get("content"))
        p.result = extra
        if block.get("is_error"):
            text = re.sub(r"</?tool_use_error>", "", p.result_text).strip()
            p.error = text.splitlines()[0] if text else "error"
        return True

    def _flush(self, force: bool = False) -> Iterator[ParsedItem]:
        while self._pending:
            head = next(iter(self._pending.values()))
            if not (head.done or force or len(self._pending) > _MAX_PENDING):
                return
            del self._pending[head.id]
            self._pending_b = [k.encode() for k in self._pending]
            item = self._convert(head)
            if item is not None:
                yield item

    def _convert(self, p: _Pending) -> ParsedItem | None:
        where = f"{self.where}:{p.line}"
        if p.error is not None:
            return Skipped(p.line, f"{p.tool} refused by the tool ({_cut(p.error)})")
        if p.sidechain and self._main_seen:
            return Skipped(p.line, "a subagent's own todo list (sidechain)")
        ts = p.ts or self.fallback_ts
        try:
            if p.tool == "TodoWrite":
                write = parse(p.input, "claude", where)
            else:
                write = self._task_call(p, where)
                if write is None:
                    return Skipped(p.line, f"{p.tool} without a result to read")
        except InputError as exc:
            return Skipped(p.line, f"{p.tool}: {exc.message}", True)
        return Call(line=p.line, ts=ts, ref=p.id, key=f"claude:{p.id}", tool=p.tool,
                    write=write)

    # -- the task tools: one task per call, a whole list per import --------------------
    def _task_call(self, p: _Pending, where: str) -> AgentWrite | None:
        inp = p.input if isinstance(p.input, dict) else {}
        if p.tool == "TaskCreate":
            subject = inp.get("subject") or inp.get("content")
            if not isinstance(subject, str) or not subject.strip():
                raise InputError("missing subject", where=where)
            tid = self._created_id(p)
            self._tasks[tid] = [subject, "pending", _str(inp.get("activeForm"))]
        elif p.tool == "TaskUpdate":
            tid = str(inp.get("taskId", inp.get("id", ""))).lstrip("#")
            if not tid:
                raise InputError("missing taskId", where=where)
            status = inp.get("status")
            if status is not None and status not in (*_STATUSES, "deleted"):
                raise InputError(f"unknown status {status!r} (expected pending, in_progress, "
                                 "completed or deleted)", where=where)
            task = self._tasks.get(tid)
            if task is None:
                subject = inp.get("subject")
                if not isinstance(subject, str) or not subject.strip():
                    raise InputError(f"TaskUpdate of unknown task #{tid}", where=where)
                task = self._tasks[tid] = [subject, "pending", None]
            if status == "deleted":
                del self._tasks[tid]
            else:
                if status is not None:
                    task[1] = status
                if isinstance(inp.get("subject"), str) and inp["subject"].strip():
                    task[0] = inp["subject"]
                if isinstance(inp.get("activeForm"), str):
                    task[2] = inp["activeForm"]
        else:  # TaskList: its result is the whole list
            listed = self._listed(p, where)
            if listed is None:
                return None
            old = self._tasks
            self._tasks = {tid: [subject, status, old.get(tid, [None, None, None])[2]]
                           for tid, subject, status in listed}
        self._bump()
        items = [Item(subject, status, None, form, tid)
                 for tid, (subject, status, form) in self._tasks.items()]
        return AgentWrite(caps=CLAUDE_TASKS, items=items)

    def _created_id(self, p: _Pending) -> str:
        res = p.result
        if isinstance(res, dict) and isinstance(res.get("task"), dict) \
                and res["task"].get("id") is not None:
            return str(res["task"]["id"])
        m = _TASK_NO.search(p.result_text)
        if m:
            return m.group(1)
        tid = str(self._next_task)
        while tid in self._tasks:
            self._next_task += 1
            tid = str(self._next_task)
        return tid

    def _bump(self) -> None:
        nums = [int(t) for t in self._tasks if t.isdigit()]
        self._next_task = max([self._next_task - 1, *nums]) + 1

    def _listed(self, p: _Pending, where: str) -> list[tuple[str, str, str]] | None:
        res = p.result
        rows: list[tuple[str, str, str]] = []
        if isinstance(res, dict) and isinstance(res.get("tasks"), list):
            for t in res["tasks"]:
                if isinstance(t, dict) and t.get("id") is not None:
                    rows.append((str(t["id"]), str(t.get("subject", "")),
                                 str(t.get("status", "pending"))))
        elif p.done:
            for line in p.result_text.splitlines():
                m = _TASK_LINE.match(line)
                if m:
                    rows.append((m.group(1), m.group(3), m.group(2).strip().replace(" ", "_")))
            if not rows and "no tasks" not in p.result_text.lower():
                return None
        else:
            return None
        for tid, subject, status in rows:
            if status not in _STATUSES:
                raise InputError(f"task #{tid}: unknown status {status!r}", where=where)
            if not subject.strip() and tid not in self._tasks:
                raise InputError(f"task #{tid}: missing subject", where=where)
        return [(tid, subject or self._tasks[tid][0], status) for tid, subject, status in rows]


def _depth(raw: bytes) -> int:
    """Open minus close brackets on a line, outside strings (JSON strings hold no
    newlines, so a line never ends inside one)."""
    text = re.sub(rb'"(?:\\.|[^"\\])*"', b"", raw)
    return text.count(b"{") + text.count(b"[") - text.count(b"}") - text.count(b"]")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content
                         if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _cut(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
