"""`harness db copy`: SQLite -> PostgreSQL -> SQLite keeps every row of every table, byte
for byte; a non-empty target is refused; a failed copy leaves the target untouched."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, select

from harness import formats, todos
from harness.agents.todolist import todowrite
from state import tx as tx_mod
from state.db.connection import normalize_url
from state.fold import SessionState, apply
from state.maintain.copy import tables
from state.schema import migrations
from state.series import SeriesPoint
from state.store import Store
from tests.conftest import run_cli

pytestmark = pytest.mark.postgres


def fill(store: Store) -> None:
    """A store with something in every table, and values that are easy to mangle."""
    sid = store.create_session("campaign", actor="human", pipeline="eagle3.yaml")
    nasty = "línea — ✓ \x1b[31mred\x1b[0m 'quote' \"dq\" \\ back\nnew line\ttab 🙂"
    with store.write(sid, "human") as tx:
        a = tx.create_todo("Generate 10K samples", priority="high", stage="generate",
                           active_form="Generating")
        b = tx.create_todo(nasty, depends_on=[a.num], position=0.1 + 0.2)
        tx.update_todo(b.num, status="blocked", blocked_reason="acceptance 15% < 40%")
        run = tx.queue_run(todo_id=a.num, host="gpu", stage="generate", command="python x.py")
        tx.update_run(run.id, state="failed", pid=4242, exit_code=-9, reason="OOM",
                      result={"tau": 1.17, "ok": False, "nested": {"k": [1, 2.5, None]}})
        tx.append_log(run.id, 0, "step 1\n")
        tx.append_log(run.id, 7, "step 2 \x00 with a NUL\n")
        tx.append_points([  # a loss of 1/3, a NaN (stored as NULL), a named x and a spread
            SeriesPoint(run_id=run.id, start=0, metric="loss", axis="step", x=1, y=1 / 3,
                        ts="2026-12-01T00:00:00.000000Z"),
            SeriesPoint(run_id=run.id, start=7, metric="loss", axis="step", x=2,
                        y=float("nan"), ts="2026-12-01T00:00:01.000000Z"),
            SeriesPoint(run_id=run.id, start=30, metric="tau", axis="checkpoint",
                        x="epoch-001 ✓", y=3.1, labels={"position": 1, "k": "v"}, lo=2.9,
                        hi=3.25, ts="2026-12-01T00:00:02.000000Z")])
        tx.record_verification(todo_id=a.num, run_id=run.id, kind="checkpoint", passed=False,
                               verdict="d2t missing", checks=[{"name": "d2t", "ok": False}],
                               metrics={"acceptance": 0.15}, gate={"min": 2.0})
        tx.record_verification(todo_id=a.num, run_id=run.id, kind="smoke", passed=True,
                               verdict="ok", checks=[], metrics={}, gate={})
        tx.record_artifact(todo_id=a.num, run_id=run.id, path="/data/eagle3/model.safetensors",
                           sha256="ab" * 32, size=16 * 2**30, kind="checkpoint")
    for i in range(30):
        todos.add(store, sid, f"filler {i}", priority=("high", "medium", "low")[i % 3])
    todowrite(store, sid, formats.parse({"todos": [
        {"content": "Agent step one", "status": "in_progress", "priority": "high"},
        {"content": "Agent step two", "status": "pending", "priority": "low"}]}),
        actor="agent:opencode")
    fork = store.create_session("campaign-fork", actor="human", parent_id=sid, fork_n=3)
    todos.add(store, fork, "only in the fork")
    todos.note(store, sid, a.num, "checked on the H200")


def raw_rows(path: Path) -> dict[str, list[tuple]]:
    """Every table's rows as SQLite stores them (types included), in primary-key order."""
    con = sqlite3.connect(path)
    try:
        out = {}
        for t in tables():
            pk = ", ".join(c.name for c in t.primary_key.columns)
            out[t.name] = con.execute(f"SELECT * FROM {t.name} ORDER BY {pk}").fetchall()
        return out
    finally:
        con.close()


def typed_rows(url: str) -> dict[str, list[tuple]]:
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            return {t.name: [tuple(r) for r in conn.execute(
                        select(t).order_by(*t.primary_key.columns))] for t in tables()}
    finally:
        engine.dispose()


def test_sqlite_to_postgres_to_sqlite_is_lossless(tmp_path: Path, pg_url: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tx_mod, "SNAPSHOT_EVERY", 8)
    first = tmp_path / "first.db"
    with Store.open(str(first)) as s:
        fill(s)
    before = raw_rows(first)
    assert all(before[t] for t in ("events", "todos", "runs", "run_logs", "verifications",
                                   "artifacts", "snapshots", "agent_views", "migrations",
                                   "run_series"))

    r = run_cli(["db", "copy", "--from", str(first), "--to", pg_url, "--json"])
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["counts"] == {k: len(v) for k, v in before.items()}
    assert typed_rows(str(first)) == typed_rows(pg_url)

    back = tmp_path / "back.db"
    r = run_cli(["db", "copy", "--from", pg_url, "--to", str(back)])
    assert r.code == 0, r.err
    assert raw_rows(back) == before  # same values, same storage types: 0/1, REAL, TEXT
    assert repr(raw_rows(back)) == repr(before)

    with Store.open(pg_url) as pgs:
        sid = pgs.session_by_name("campaign").id
        assert pgs.log(1)[0] == "step 1\nstep 2 \x1a with a NUL\n"
        assert pgs.artifacts(sid)[0].size == 16 * 2**30
        # The copy is a live store: its session id sequence continues after the copy...
        new = pgs.create_session("after-copy", actor="human")
        assert new == max(s.id for s in pgs.sessions() if s.name != "after-copy") + 1
        todos.add(pgs, sid, "written on PostgreSQL after the copy")
        # ... and replay still equals the projection.
        folded = SessionState(session_id=sid)
        for ev in pgs.events(sid):
            apply(folded, ev)
        assert folded.to_json() == pgs.projection_state(sid).to_json()
        assert pgs.state_at(sid).to_json() == pgs.projection_state(sid).to_json()


def test_non_empty_target_is_refused_unless_replace(tmp_path: Path, pg_url: str) -> None:
    src = tmp_path / "src.db"
    with Store.open(str(src)) as s:
        sid = s.create_session("one", actor="human")
        todos.add(s, sid, "from the source")
    with Store.open(pg_url) as t:
        tid = t.create_session("already-there", actor="human")
        todos.add(t, tid, "precious")
    held = typed_rows(pg_url)

    r = run_cli(["db", "copy", "--from", str(src), "--to", pg_url])
    assert r.code == 1
    assert r.err.startswith("error: ") and "target is not empty" in r.err
    assert "--replace" in r.err and len(r.err.strip().splitlines()) == 1
    assert typed_rows(pg_url) == held

    r = run_cli(["db", "copy", "--from", str(src), "--to", pg_url, "--replace", "--json"])
    assert r.code == 0, r.err
    assert json.loads(r.out)["replaced"] == {"sessions": 1, "events": 2, "todos": 1}
    assert typed_rows(pg_url) == typed_rows(str(src))

    r = run_cli(["db", "copy", "--from", str(src), "--to", str(src)])
    assert r.code == 1 and "same store" in r.err


def test_failed_copy_leaves_the_target_as_it_was(tmp_path: Path, pg_url: str) -> None:
    src = tmp_path / "old.db"
    with Store.open(str(src)) as s:
        sid = s.create_session("one", actor="human")
        todos.add(s, sid, "fine")
    # A store written before NUL was refused: PostgreSQL's text cannot take it.
    con = sqlite3.connect(src)
    con.execute("UPDATE todos SET content = ?", ("bad \x00 byte",))
    con.commit()
    con.close()
    r = run_cli(["db", "copy", "--from", str(src), "--to", pg_url])
    assert r.code == 1
    assert "cannot copy table todos" in r.err and "NUL" in r.err
    engine = create_engine(pg_url)
    try:
        assert inspect(engine).get_table_names() == []  # not even the schema was left
    finally:
        engine.dispose()


def test_db_info_and_upgrade(pg_url: str) -> None:
    r = run_cli(["--db", pg_url, "db", "upgrade", "--dry-run", "--json"])
    assert r.code == 0, r.err
    every = [name for name, _ in migrations.MIGRATIONS]
    assert json.loads(r.out)["pending"] == every
    info = json.loads(run_cli(["--db", pg_url, "db", "info", "--json"]).out)
    assert info["backend"] == "postgresql" and info["schema"] is None
    assert info["counts"] == {}
    r = run_cli(["--db", pg_url, "db", "upgrade"])
    assert r.code == 0 and f"applied {', '.join(every)}" in r.out
    assert "up to date" in run_cli(["--db", pg_url, "db", "upgrade"]).out
    assert run_cli(["--db", pg_url, "add", "x"]).code == 0
    info = json.loads(run_cli(["--db", pg_url, "db", "info", "--json"]).out)
    assert info["schema"] == every[-1] and info["pending"] == []
    assert info["counts"]["events"] == 2 and info["counts"]["todos"] == 1
    assert info["server_version"].split(".")[0].isdigit()


def test_the_readmes_move_to_postgresql(tmp_path: Path, pg_url: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's order: the store the other commands use (here the user data
    directory's default) is what `db copy` copies without --from; then HARNESS_DB points
    every command at the team's database. A --from that names no store says which one is
    in use."""
    assert run_cli(["session", "new", "tour"]).code == 0  # the README's tour session
    assert run_cli(["add", "Train the drafter"]).code == 0
    store = json.loads(run_cli(["where", "--json"]).out)["store"]  # a path
    wrong = run_cli(["db", "copy", "--from", str(tmp_path / ".harness" / "state.db"),
                     "--to", pg_url])
    assert wrong.code == 3 and wrong.err.count("\n") == 1, wrong.err
    assert "--from: no store here" in wrong.err
    assert f"the store the other commands use is {store} (the user data directory" in wrong.err
    done = run_cli(["db", "copy", "--to", pg_url])
    assert done.code == 0, done.err
    assert done.out.endswith("your current session there is 'tour', as here\n")
    monkeypatch.setenv("HARNESS_DB", pg_url)
    assert json.loads(run_cli(["where", "--json"]).out)["session"] == "tour"
    listed = json.loads(run_cli(["list", "--json"]).out)
    assert [t["content"] for t in listed] == ["Train the drafter"]
    again = run_cli(["db", "copy", "--to", pg_url])  # now the source is the target
    assert again.code == 1 and "source and target are the same store" in again.err
