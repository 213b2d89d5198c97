"""The store itself: migrations, transactions, projections equal to the fold, snapshots,
and two processes writing at once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import inspect
from sqlmodel import SQLModel

from state import tx as tx_mod
from state.errors import InvalidChange, StoreUnavailable
from state.fold import SessionState, apply
from state.schema import migrations
from state.schema.models import ALL_TABLES
from state.store import Store
from tests.conftest import ROOT


def test_schema_matches_models_and_is_recorded(store: Store) -> None:
    insp = inspect(store.engine)
    for model in ALL_TABLES:
        table = model.__table__
        cols = {c["name"] for c in insp.get_columns(table.name)}
        assert cols == {c.name for c in table.columns}, table.name
    with store.engine.connect() as conn:
        names = [r[0] for r in conn.exec_driver_sql("SELECT name FROM migrations")]
    assert names == [name for name, _ in migrations.MIGRATIONS]
    assert names[:3] == ["001_baseline", "002_store_id", "003_import_sources"]
    assert set(SQLModel.metadata.tables) >= {m.__table__.name for m in ALL_TABLES}


@pytest.mark.sqlite
def test_sqlite_pragmas_on_every_connection(store: Store) -> None:
    for _ in range(3):
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0


def test_event_and_projection_commit_together_or_not_at_all(store: Store) -> None:
    sid = store.create_session("s", actor="human")
    with pytest.raises(InvalidChange), store.write(sid, "human") as tx:
        tx.create_todo("one")
        tx.create_todo("two", status="bogus")
    assert store.todos(sid) == []
    assert [e.kind for e in store.events(sid)] == ["session.created"]


def test_projection_equals_fold_of_events(store: Store) -> None:
    sid = store.create_session("s", actor="human")
    with store.write(sid, "human") as tx:
        a = tx.create_todo("a", priority="high")
        b = tx.create_todo("b", depends_on=[a.num])
        tx.update_todo(b.num, status="blocked", blocked_reason="why")
        tx.remove_todo(a.num, reason="test")
        run = tx.queue_run(todo_id=b.num, host="local", stage="x")
        tx.update_run(run.id, state="running", pid=42)
        tx.record_verification(todo_id=b.num, run_id=run.id, kind="checkpoint", passed=False,
                               verdict="acceptance 15%", checks=[{"name": "d2t"}],
                               metrics={"tau": 1.17}, gate={"min_tau": 2})
    folded = SessionState(session_id=sid)
    for ev in store.events(sid):
        apply(folded, ev)
    stored = store.projection_state(sid)
    assert folded.to_json() == stored.to_json()
    assert store.state_at(sid).to_json() == stored.to_json()


def test_snapshots_make_state_at_a_seek(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tx_mod, "SNAPSHOT_EVERY", 10)
    sid = store.create_session("s", actor="human")
    history = {}
    for i in range(35):
        with store.write(sid, "human") as tx:
            if i % 3 == 0 or not tx.state.todos:
                tx.create_todo(f"item {i}")
            else:
                num = sorted(tx.state.todos)[i % len(tx.state.todos)]
                tx.update_todo(num, content=f"item {i} edited")
        n = store.last_n(sid)
        history[n] = json.dumps(store.projection_state(sid).to_json()["todos"])
    with store.engine.connect() as conn:
        snaps = [r[0] for r in conn.exec_driver_sql("SELECT n FROM snapshots ORDER BY n")]
    assert snaps == [10, 20, 30]
    for n, todos in history.items():
        assert json.dumps(store.state_at(sid, n).to_json()["todos"]) == todos, n


WRITER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from harness import formats, todos
    from harness.agents.todolist import todowrite
    from state.store import Store
    db, who, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    store = Store.open(db)
    sid = store.session_by_name("race").id
    while not go.exists():
        time.sleep(0.001)
    items = []
    for i in range(count):
        if who == "agent":
            items.append({"content": f"agent item {i}", "status": "pending",
                          "priority": "high"})
            if i and i % 7 == 0:
                items[i - 1]["status"] = "completed"
            todowrite(store, sid, formats.parse({"todos": items}), actor="agent:racer")
        else:
            todos.add(store, sid, f"human item {i}")
    print("ok")
""")


def test_two_processes_writing_at_once(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    s = Store.open(str(db))
    s.create_session("race", actor="human")
    go = tmp_path / "go"
    env = {"PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), who, "150", str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
             for who in ("agent", "human")]
    go.touch()
    for p in procs:
        _out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()
        assert b"locked" not in err
    sid = s.session_by_name("race").id
    todos = s.todos(sid)
    contents = {t.content for t in todos}
    assert {f"agent item {i}" for i in range(150)} <= contents
    assert {f"human item {i}" for i in range(150)} <= contents
    assert len(todos) == 300
    assert sum(t.status == "completed" for t in todos) == len(range(7, 150, 7))
    events = s.events(sid)
    assert [e.n for e in events] == list(range(1, len(events) + 1))
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    folded = SessionState(session_id=sid)
    for ev in events:
        apply(folded, ev)
    assert folded.to_json()["todos"] == s.projection_state(sid).to_json()["todos"]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    s.close()


def test_opening_a_fresh_file_waits_for_another_harness_creating_it(tmp_path: Path) -> None:
    # What a second harness meets when two open a new store at once: the other holds the
    # write lock on a file still in rollback mode. SQLite fails the switch to WAL at once
    # there, without its busy handler; the open must wait like any locked statement.
    # (Harnesses now create a store beside it and link it into place; an older one, or
    # another program, still creates it in place like this.)
    with Store.open(str(tmp_path / "model.db")):
        pass
    model = sqlite3.connect(tmp_path / "model.db")
    schema = [r[0] for r in model.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT "
                                          "NULL AND name NOT LIKE 'sqlite_%'")]
    done = model.execute("SELECT name, applied_at FROM migrations").fetchall()
    model.close()
    db = tmp_path / "fresh.db"
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    for sql in schema:
        other.execute(sql)
    other.executemany("INSERT INTO migrations VALUES (?, ?)", done)
    other.execute("INSERT INTO meta VALUES ('store_id', 'abc')")
    timer = threading.Timer(0.4, other.execute, ("COMMIT",))
    t0 = time.monotonic()
    timer.start()
    try:
        s = Store.open(str(db))
    finally:
        timer.join()
        other.close()
    waited = time.monotonic() - t0
    assert waited >= 0.35, waited
    with s.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert s.pending_migrations() == []
    s.close()


def test_opening_a_busy_fresh_file_still_times_out(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_BUSY_TIMEOUT_MS", "300")
    db = tmp_path / "fresh.db"
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE scratch (x)")
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable, match="locked"):
        Store.open(str(db))
    # waited its busy timeout, and did not hang (the upper bound allows a loaded machine)
    assert 0.25 <= time.monotonic() - t0 < 60
    other.execute("ROLLBACK")
    other.close()


def test_watch_sees_every_commit_of_others_and_nothing_else(db_url: str) -> None:
    """The TUI's change detection: PRAGMA data_version on SQLite, LISTEN on PostgreSQL."""
    reader, writer = Store.open(db_url), Store.open(db_url)
    try:
        sid = writer.create_session("s", actor="human")
        with reader.watch() as watch:
            assert watch.changed()  # the first look always counts
            assert not watch.changed()
            with writer.write(sid, "human") as tx:
                tx.create_todo("a")
            assert _soon(watch.changed)
            assert not watch.changed()
            with pytest.raises(InvalidChange), writer.write(sid, "human") as tx:
                tx.create_todo("rolled back")
                tx.create_todo("bad", status="bogus")
            assert not _soon(watch.changed, wait=0.3)
            with writer.write(sid, "runner") as tx:  # a log append writes no event
                run = tx.queue_run(todo_id=None, host="local")
            assert _soon(watch.changed)
            with writer.write(sid, "runner") as tx:
                tx.append_log(run.id, 0, "epoch 1\n")
            assert _soon(watch.changed)
            assert not watch.changed()
    finally:
        reader.close()
        writer.close()


def _soon(check: Callable[[], bool], wait: float = 5.0) -> bool:
    """Notifications cross a socket: give them a moment, and no more."""
    deadline = time.monotonic() + wait
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
