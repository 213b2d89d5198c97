"""`harness hook copilot --event EVENT` with payloads in GitHub Copilot CLI 1.0.102's
shapes (``sessionId``, ``timestamp`` in ms, ``cwd``, then the event's own fields; no event
name) and a session database with its todo tables: the table is merged as the agent's
list with its dependencies, the list comes back at a start and after a compaction, and a
person's change is told once, named by the todo's id. The real program is in
tests/agents/real/test_copilot_cli.py."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import todos as uc
from harness.agents.copilot import hooks as copilot
from harness.context import Harness
from state.store import Store
from tests.conftest import DATA, harness_subprocess

SID = "1e3b18c4-7762-4548-9da2-a9882dc7c658"
# The tables as Copilot CLI 1.0.102 creates them in every session's database.
SCHEMA = """
CREATE TABLE todos (id TEXT PRIMARY KEY, title TEXT NOT NULL, description TEXT,
    status TEXT DEFAULT 'pending' CHECK(status IN ('pending', 'in_progress', 'done', 'blocked')),
    created_at TEXT DEFAULT (datetime('now')), updated_at TEXT DEFAULT (datetime('now')));
CREATE TABLE todo_deps (todo_id TEXT NOT NULL, depends_on TEXT NOT NULL,
    PRIMARY KEY (todo_id, depends_on));
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "copilot"))
    db = tmp_path / "copilot" / "session-state" / SID / "session.db"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as con:
        con.executescript(SCHEMA)
    return tmp_path / "copilot"


@pytest.fixture
def h(db_path: Path, home: Path) -> Iterator[Harness]:
    harness = Harness(str(db_path), "eagle3", announce=False)
    yield harness
    harness.close()


def model_sql(home: Path, query: str) -> dict[str, Any]:
    """What the model's ``sql`` call does to the session database, and the payload of the
    ``postToolUse`` hook after it."""
    with sqlite3.connect(home / "session-state" / SID / "session.db") as con:
        con.executescript(query)
    return {"sessionId": SID, "timestamp": 1796409665309, "cwd": "/work/eagle3",
            "toolName": "sql", "toolArgs": {"description": "todos", "query": query},
            "toolResult": {"resultType": "success", "textResultForLlm": "ok"}}


def base(**kw: Any) -> dict[str, Any]:
    return {"sessionId": SID, "timestamp": 1796409664563, "cwd": "/work/eagle3", **kw}


def context(answer: str | None) -> str:
    assert answer is not None
    doc = json.loads(answer)
    assert list(doc) == ["additionalContext"]
    return str(doc["additionalContext"])


def listed(h: Harness) -> list[tuple[str, str, str, list[int]]]:
    return [(t.content, t.status, t.priority, t.depends_on)
            for t in sorted(h.store.todos(h.session().id), key=lambda t: t.position)]


PLAN = ("INSERT INTO todos (id, title) VALUES ('regen', 'Regenerate samples'), "
        "('vocab', 'Build the vocab mapping'), ('train', 'Train the drafter'); "
        "INSERT INTO todo_deps VALUES ('vocab', 'regen'), ('train', 'vocab');")


def test_the_todos_table_is_the_agents_list(h: Harness, home: Path) -> None:
    assert copilot.handle(model_sql(home, PLAN), h, event="postToolUse") is None
    assert listed(h) == [("Regenerate samples", "pending", "medium", []),
                         ("Build the vocab mapping", "pending", "medium", [1]),
                         ("Train the drafter", "pending", "medium", [2])]
    uc.add(h.store, h.session().id, "Check the acceptance length")  # a person's
    copilot.handle(model_sql(home, "UPDATE todos SET status = 'done' WHERE id = 'regen'; "
                                   "UPDATE todos SET status = 'blocked' WHERE id = 'vocab'; "
                                   "DELETE FROM todo_deps WHERE todo_id = 'train'; "
                                   "INSERT INTO todo_deps VALUES ('train', 'regen'); "
                                   "DELETE FROM todos WHERE id = 'vocab';"),
                   h, event="postToolUse")
    assert listed(h) == [("Regenerate samples", "completed", "medium", []),
                         ("Train the drafter", "pending", "medium", [1]),
                         ("Check the acceptance length", "pending", "medium", [])]
    before = h.store.last_n(h.session().id)
    read = model_sql(home, "SELECT * FROM todos")
    copilot.handle({**read, "toolResult": {"resultType": "failure"}}, h, event="postToolUse")
    copilot.handle(read, h, event="postToolUse")  # nothing changed: no event
    copilot.handle({**read, "toolName": "bash", "toolArgs": {"command": "ls"}}, h,
                   event="postToolUse")
    assert h.store.last_n(h.session().id) == before


def test_a_persons_change_is_told_once_by_the_todos_id(h: Harness, home: Path) -> None:
    copilot.handle(model_sql(home, PLAN), h, event="postToolUse")
    uc.set_priority(h.store, h.session().id, "t3", "high")
    told = context(copilot.handle(base(prompt="go on"), h, event="userPromptSubmitted"))
    assert told.splitlines()[1:] == [
        "- train \"Train the drafter\" (t3): priority 'medium' -> 'high' by human"]
    assert copilot.handle(base(prompt="go on"), h, event="userPromptSubmitted") is None


def test_the_list_comes_back_at_a_start_and_after_a_compaction(h: Harness,
                                                               home: Path) -> None:
    assert copilot.handle(base(source="new", initialPrompt="plan"), h,
                          event="sessionStart") is None  # nothing to give back yet
    copilot.handle(model_sql(home, PLAN), h, event="postToolUse")
    back = context(copilot.handle(base(source="resume"), h, event="sessionStart"))
    assert back.startswith("Todo list (session eagle3): 0/3 completed.")
    assert "[ ] t3 Train the drafter (medium) - waiting on t2" in back
    transcript = str(home / "session-state" / SID / "events.jsonl")
    assert copilot.handle(base(transcriptPath=transcript, trigger="auto",
                               customInstructions=""), h, event="preCompact") is None
    after = context(copilot.handle(model_sql(home, "SELECT id FROM todos"), h,
                                   event="postToolUse"))
    assert after == back
    assert copilot.handle(model_sql(home, "SELECT id FROM todos"), h,
                          event="postToolUse") is None
    cuts = [(e.payload["cut"], e.payload.get("trigger"))
            for e in h.store.events(h.session().id) if e.kind == "agent.context"]
    assert cuts == [("startup", None), ("resume", None), ("compact", "auto")]


def test_the_hook_never_fails_copilot(db_path: Path, home: Path, tmp_path: Path) -> None:
    env = {"HARNESS_DB": str(db_path), "HARNESS_SESSION": "eagle3",
           "COPILOT_HOME": str(home)}
    gone = model_sql(home, PLAN)
    gone["sessionId"] = "0000aaaa-0000-0000-0000-000000000000"  # no such database
    r = harness_subprocess(["hook", "copilot", "--event", "postToolUse"],
                           stdin=json.dumps(gone).encode(), env=env)
    assert r.returncode == 0 and r.stdout == b""
    assert "cannot open Copilot CLI's session database" in \
        (tmp_path / "data" / "logs" / "hooks.log").read_text()
    ok = harness_subprocess(["hook", "copilot", "--event", "postToolUse"],
                            stdin=json.dumps(model_sql(home, "SELECT 1 FROM todos")).encode(),
                            env=env)
    assert ok.returncode == 0 and ok.stderr == b""
    missing = harness_subprocess(["hook", "copilot"], stdin=b"{}", env=env)
    assert missing.returncode == 0 and missing.stdout == b""
    assert "no --event: Copilot CLI's payloads do not name their event" in \
        (tmp_path / "data" / "logs" / "hooks.log").read_text()


# -- harness import of its session events ----------------------------------------------------

EVENTS = DATA / "copilot" / "events-1.0.102.jsonl"  # tests/agents/real/test_copilot_cli.py's


def test_import_replays_the_sql_calls_to_the_list_the_hooks_saw(db_path: Path) -> None:
    from harness.importers import import_file

    with Store.open(str(db_path)) as store:
        r = import_file(store, EVENTS, session="copied")
        assert (r.format, r.calls, r.imported, r.malformed_count) == ("copilot-events", 3, 3, 0)
        row = store.session_by_name("copied")
        assert row is not None
        got = [(t.content, t.status, t.depends_on)
               for t in sorted(store.todos(row.id), key=lambda t: t.num)]
        assert got == [("Regenerate samples", "completed", []),
                       ("Build the vocab mapping", "in_progress", [1]),
                       ("Train the drafter", "pending", [2])]
        refs = {e.ref for e in store.events(row.id) if e.kind.startswith("todo.")}
        assert refs == {"call_2", "call_4", "call_6"}  # each change at its own call
        again = import_file(store, EVENTS, session="copied")
        assert (again.imported, again.already) == (0, 3)


def event(kind: str, **data: Any) -> str:
    return json.dumps({"type": kind, "data": data, "id": kind, "timestamp":
                       "2026-12-07T01:13:07.000Z", "parentId": None})


def test_a_replayed_query_reaches_nothing_but_its_own_tables(db_path: Path,
                                                             tmp_path: Path) -> None:
    from harness.importers import import_file

    outside = tmp_path / "outside.db"
    lines = [event("session.start", sessionId=SID, producer="copilot-agent")]
    queries = [PLAN, f"ATTACH DATABASE '{outside}' AS x; CREATE TABLE x.todos (id TEXT)",
               f"UPDATE todos SET title = 'x'; VACUUM INTO '{outside}'",
               "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
               "UPDATE todos SET title = (SELECT max(i) FROM n) WHERE id = 'regen'",
               "UPDATE todos SET status = 'done' WHERE id = 'regen'"]
    for i, query in enumerate(queries):
        lines += [event("tool.execution_start", toolCallId=f"c{i}", toolName="sql",
                        arguments={"description": "todos", "query": query}),
                  event("tool.execution_complete", toolCallId=f"c{i}", success=True)]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with Store.open(str(db_path)) as store:
        r = import_file(store, path, session="copied")
        assert (r.format, r.imported, r.malformed_count) == ("copilot-events", 2, 3), r.malformed
        assert not outside.exists()
        row = store.session_by_name("copied")
        assert row is not None
        got = {t.content: t.status for t in store.todos(row.id)}
        assert got["Regenerate samples"] == "completed"
