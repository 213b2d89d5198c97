"""GitHub Copilot CLI's session events: ``$COPILOT_HOME/session-state/<id>/events.jsonl``.

Each line is ``{type, data, id, timestamp, parentId}``; the first is ``session.start``
(``data.sessionId``, ``data.producer`` ``copilot-agent``). Copilot CLI's model keeps its
plan in its session database's ``todos`` and ``todo_deps`` tables with the ``sql`` tool:
a call is ``tool.execution_start`` (``data.toolCallId``, ``toolName`` ``sql``,
``arguments.query``) and its end ``tool.execution_complete`` (``success``).

The list is what the tables hold, so the queries are replayed, in the order they ran,
into an in-memory database made with Copilot CLI's own schema for them; after each
successful query that touches them, the tables are read whole and merged as the agent's
list, its dependencies as ``depends_on``, exactly as the hooks do
(:func:`harness.agents.copilot.hooks.apply_table`). A query that failed in Copilot CLI
changed nothing and is skipped; one that cannot be replayed (it reads another table of
the session's database) is reported and skipped. A replayed query can touch nothing but
that in-memory database: attaching files, ``VACUUM INTO`` and pragmas are refused, and
a query that runs too long is stopped.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from functools import partial
from typing import IO, Any

from harness.agents.copilot.hooks import TODO_TABLES, apply_table, table_items
from harness.agents.transcripts import Call, Item, Parser, Skipped, to_ts
from harness.errors import InputError

# The tables as Copilot CLI 1.0.102 creates them in each session's database.
SCHEMA = """
CREATE TABLE todos (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    description TEXT,
    status TEXT DEFAULT 'pending' CHECK(status IN ('pending', 'in_progress', 'done',
                                                   'blocked')),
    created_at TEXT DEFAULT (datetime('now')),
    updated_at TEXT DEFAULT (datetime('now'))
);
CREATE TABLE todo_deps (
    todo_id TEXT NOT NULL,
    depends_on TEXT NOT NULL,
    PRIMARY KEY (todo_id, depends_on),
    FOREIGN KEY (todo_id) REFERENCES todos(id),
    FOREIGN KEY (depends_on) REFERENCES todos(id)
);
"""
_META_LINES = 5
_REFUSED = re.compile(r"\b(attach|detach|vacuum|load_extension)\b", re.I)
_DENY = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA}
MAX_STEPS = 200  # progress-handler calls (of 10,000 VM steps each) a query may take


def _authorize(action: int, *_args: Any) -> int:
    return sqlite3.SQLITE_DENY if action in _DENY else sqlite3.SQLITE_OK


class CopilotEventsParser(Parser):
    fmt = "copilot-events"

    def __init__(self, fh: IO[bytes], where: str, *, fallback_ts: str | None = None):
        super().__init__(fh, where, fallback_ts=fallback_ts)
        self._pending: dict[str, tuple[int, str]] = {}  # call id -> (line, query)
        self._last: tuple[Any, ...] | None = None  # the tables after the last call

    def __iter__(self) -> Iterator[Item]:
        con = sqlite3.connect(":memory:")
        try:
            con.executescript(SCHEMA)
            con.set_authorizer(_authorize)
            yield from self._read(con)
        finally:
            con.close()

    def _read(self, con: sqlite3.Connection) -> Iterator[Item]:
        def wanted(num: int, raw: bytes) -> bool:
            return num <= _META_LINES or b'"tool.execution_' in raw

        for got in self._json_lines(wanted):
            if isinstance(got, Skipped):
                yield got
                continue
            num, obj = got
            kind, data = obj.get("type"), obj.get("data")
            self._saw_ts(to_ts(obj.get("timestamp")))
            if not isinstance(data, dict):
                self.non_todo += 1
                continue
            if kind == "session.start":
                sid = data.get("sessionId")
                if isinstance(sid, str) and self.info.session_hint is None:
                    self.info.session_hint = sid
                self.non_todo += 1
            elif kind == "tool.execution_start" and data.get("toolName") == "sql":
                args = data.get("arguments")
                query = args.get("query") if isinstance(args, dict) else None
                if isinstance(query, str) and TODO_TABLES.search(query):
                    self._pending[str(data.get("toolCallId"))] = (num, query)
                else:
                    self.non_todo += 1
            elif kind == "tool.execution_complete" and str(data.get("toolCallId")) in \
                    self._pending:
                call_id = str(data.get("toolCallId"))
                line, query = self._pending.pop(call_id)
                if data.get("success") is not True:
                    yield Skipped(line, "sql call that failed in Copilot CLI")
                    continue
                yield from self._replay(con, line, call_id, query)
            else:
                self.non_todo += 1
        for line, _query in self._pending.values():
            yield Skipped(line, "sql call with no end in the events (still running?)")

    def _replay(self, con: sqlite3.Connection, line: int, call_id: str,
                query: str) -> Iterator[Item]:
        where = f"{self.where}:{line}"
        if _REFUSED.search(query):
            yield Skipped(line, "sql call not replayed (ATTACH, VACUUM or load_extension)",
                          True)
            return
        steps = [0]

        def progress() -> int:
            steps[0] += 1
            return 1 if steps[0] > MAX_STEPS else 0

        con.set_progress_handler(progress, 10_000)
        try:
            con.executescript(query)
            items, graph = table_items(con, where)
        except (sqlite3.Error, InputError) as exc:
            yield Skipped(line, f"sql call could not be replayed ({exc})", True)
            return
        finally:
            con.set_progress_handler(None, 0)
        state = (tuple(items), tuple(sorted((k, tuple(v)) for k, v in graph.items())))
        if state == self._last:
            self.non_todo += 1  # a query that read the tables, or changed nothing
            return
        self._last = state
        when = self._last_ts or self.fallback_ts
        yield Call(line=line, ts=when, ref=call_id, key=f"copilot:{call_id}", tool="sql",
                   write=None,
                   apply=partial(apply_table, items=items, graph=graph, ts=when, ref=call_id),
                   texts=tuple(i.content for i in items))
