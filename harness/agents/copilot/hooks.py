"""``harness hook copilot --event EVENT``: GitHub Copilot CLI's hooks.

Copilot CLI keeps its plan in a table: every session has a SQLite database,
``$COPILOT_HOME/session-state/<session id>/session.db`` (``~/.copilot`` by default), with
``todos (id, title, description, status)`` (status ``pending``, ``in_progress``,
``done``, ``blocked``) and ``todo_deps (todo_id, depends_on)``, which the model writes
with its ``sql`` tool. Its command hooks get one JSON payload on stdin (``sessionId``,
``timestamp``, ``cwd`` and the event's own fields, but not the event's name, which the
installed command passes as ``--event``) and may answer ``{"additionalContext": ...}``:

* ``sessionStart`` (``source`` ``new``, ``resume``): the start is an ``agent.context``
  cut, and the answer is the whole list, which Copilot CLI puts before the first prompt.
* ``postToolUse`` of ``sql`` whose query touches the todo tables: the table is read whole
  and merged as the agent's list (the ids are the agent's; ``done`` is our
  ``completed``), its ``todo_deps`` as ``depends_on``. Every ``postToolUse`` answers
  with what others changed since the model last saw the list, which Copilot CLI appends
  to the tool's result, or the whole list when it is owed.
* ``userPromptSubmitted``: the same answer, as a reminder beside the prompt.
* ``preCompact`` (``trigger`` auto or manual): the compaction is a cut. Copilot CLI
  ignores this hook's answer, and its summary replaces the start's context: the list is
  owed to the next answer it reads (the first request after the compaction carries it).

A database that cannot be read (locked past the timeout, missing) is logged and skipped:
the next ``sql`` call reads it again.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.agents.context_cuts import agent_views, owe, owed, record_cut, whole_list
from harness.agents.notice import Labeler, positions
from harness.context import Harness
from harness.errors import InputError
from harness.formats import COPILOT, AgentWrite, Item
from harness.paths import copilot_home
from state.store import Tx

ACTOR = "agent:copilot"
EVENTS = ("sessionStart", "userPromptSubmitted", "postToolUse", "preCompact", "sessionEnd")
RESTORE_TAIL = ("Kept by todo-harness across compactions and restarts; your todos table "
                "(the sql tool) updates it. Carry on from here.")
STATUS = {"pending": "pending", "in_progress": "in_progress", "done": "completed",
          "blocked": "blocked"}
SOURCES = {"new": "startup", "startup": "startup", "resume": "resume"}
TODO_TABLES = re.compile(r"\btodo(s|_deps)\b", re.I)
DB_TIMEOUT = 5.0


def answer(text: str | None) -> str | None:
    import json

    return None if text is None else json.dumps({"additionalContext": text},
                                                ensure_ascii=False)


def handle(payload: Any, harness: Harness, *, event: str, actor: str = ACTOR) -> str | None:
    """Act on one hook payload of ``event``; return what to print (None: nothing)."""
    if not isinstance(payload, Mapping):
        raise InputError(f"hook payload must be a JSON object, not {type(payload).__name__}")
    if not event:
        raise InputError("no --event: Copilot CLI's payloads do not name their event, so "
                         "the hook's command must (`harness hook copilot install` writes it)")
    if event not in EVENTS:
        raise InputError(f"unknown event {event!r} (expected one of {', '.join(EVENTS)})")
    ids = {"session_id": payload.get("sessionId"), "trigger": payload.get("trigger")}
    if event == "sessionStart":
        cut = SOURCES.get(str(payload.get("source")))
        if cut is not None:
            record_cut(harness, ids, cut, actor=actor)
        return answer(whole_list(harness, actor, RESTORE_TAIL))
    if event == "preCompact":
        record_cut(harness, ids, "compact", actor=actor, phase="preCompact")
        owe(harness, actor)
        return None
    if event == "sessionEnd":
        return None
    if event == "postToolUse" and payload.get("toolName") == "sql":
        args = payload.get("toolArgs")
        query = args.get("query") if isinstance(args, Mapping) else None
        result = payload.get("toolResult")
        ok = not isinstance(result, Mapping) or result.get("resultType") in (None, "success")
        if ok and isinstance(query, str) and TODO_TABLES.search(query):
            sync(harness, session_db(payload), actor)
    if owed(harness, actor):
        return answer(whole_list(harness, actor, RESTORE_TAIL))
    from harness.agents.notice import take

    notice = take(harness.store, harness.session(create=True).id, actor,
                  label=labels(harness, actor))
    return answer(notice.text() if notice is not None else None)


def session_db(payload: Mapping[str, Any]) -> Path:
    """The session's database: beside the payload's transcript when it names one, else
    under ``$COPILOT_HOME/session-state/``."""
    transcript = payload.get("transcriptPath")
    if isinstance(transcript, str) and transcript:
        return Path(transcript).parent / "session.db"
    sid = payload.get("sessionId")
    if not isinstance(sid, str) or not re.fullmatch(r"[\w-]+", sid):
        raise InputError(f"postToolUse: no usable sessionId ({sid!r})")
    return copilot_home() / "session-state" / sid / "session.db"


def read_todos(db: Path) -> tuple[list[Item], dict[str, list[str]]]:
    """The todos table in its order, and each todo's dependencies, read-only."""
    where = str(db)
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=DB_TIMEOUT)
    except sqlite3.Error as exc:
        raise InputError(f"cannot open Copilot CLI's session database ({exc})",
                         where=where) from None
    try:
        return table_items(con, where)
    finally:
        con.close()


def table_items(con: sqlite3.Connection,
                where: str) -> tuple[list[Item], dict[str, list[str]]]:
    """The todos table of ``con`` as the agent's list, and the dependencies."""
    try:
        rows = con.execute("SELECT id, title, status FROM todos ORDER BY rowid").fetchall()
        deps = con.execute("SELECT todo_id, depends_on FROM todo_deps").fetchall()
    except sqlite3.Error as exc:
        raise InputError(f"cannot read the todo tables ({exc})", where=where) from None
    items = []
    for tid, title, status in rows:
        if status not in STATUS:
            raise InputError(f"todo {tid!r}: unknown status {status!r} (expected one of "
                             f"{', '.join(STATUS)})", where=where)
        if not isinstance(title, str) or not title.strip():
            raise InputError(f"todo {tid!r}: no title", where=where)
        items.append(Item(title, STATUS[status], agent_id=str(tid)))
    graph: dict[str, list[str]] = {}
    for tid, dep in deps:
        graph.setdefault(str(tid), []).append(str(dep))
    return items, graph


def sync(harness: Harness, db: Path, actor: str) -> None:
    """The agent's whole table, merged as its list (:func:`apply_table`)."""
    items, graph = read_todos(db)
    with harness.store.write(harness.session(create=True).id, actor) as tx:
        apply_table(tx, items, graph)


def apply_table(tx: Tx, items: list[Item], graph: dict[str, list[str]], *,
                ts: str | None = None, ref: str | None = None) -> None:
    """The todos table merged as the agent's whole list; its dependencies as
    ``depends_on`` (the agent drops only those on its own todos: one a person added
    stays). The hooks and ``harness import`` both come here."""
    from harness.agents.gemini.tracker import add_deps
    from harness.agents.todolist import apply_write

    result = apply_write(tx, AgentWrite(COPILOT, items), sees_response=False, ts=ts, ref=ref)
    nums = {v.agent_id: v.num for v in result.view if v.agent_id and v.num is not None}
    own = frozenset(nums.values())
    for tid, num in nums.items():
        wanted = [nums[d] for d in graph.get(tid, []) if d in nums]
        add_deps(tx, num, wanted, ts=ts, ref=ref, drop=own - set(wanted))


def labels(harness: Harness, actor: str) -> Labeler:
    """How the model knows a todo: its id in the todos table (``regen``)."""
    return positions(agent_views(harness), actor, None)
