"""The store on a real PostgreSQL server: many writers at once, roles, lock waits, dropped
connections, and fresh stores opened concurrently."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text

from harness import todos
from state.db.connection import PG_WRITE_LOCK_KEY
from state.errors import StoreError
from state.fold import SessionState, apply
from state.schema import migrations
from state.store import Store
from tests.conftest import ROOT, run_cli
from tests.pg import PgCluster

pytestmark = pytest.mark.postgres

WORKERS = 4
CHANGES = 2000

# One worker process: CHANGES write transactions through the Python API the CLI and the
# MCP server use (and every 40th through the CLI entry point itself), then a JSON report.
WORKER = textwrap.dedent("""
    import contextlib, io, json, sys, time
    from pathlib import Path
    from harness import formats, todos
    from harness.agents.todolist import todowrite
    from harness.cli.main import main
    from state.store import Store

    url, w, count, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    store = Store.open(url)
    shared = store.session_by_name("shared").id
    own = store.session_by_name(f"own{w}").id
    while not go.exists():
        time.sleep(0.001)

    def cli(*args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                main(["--db", url, "--session", "shared", *args])
                code = 0
            except SystemExit as exc:
                code = exc.code
        assert code == 0, (args, code)
        return out.getvalue()

    events = 0
    mine = {}            # num -> [content, status]; only this worker touches its items
    statuses = ["in_progress", "completed", "pending"]
    own_list = []        # this worker's agent list in its own session
    for i in range(count):
        if i % 40 == 39:
            # Through the CLI entry point: a fresh Harness and Store each time.
            if len(mine) < 25:
                t = json.loads(cli("add", f"w{w} cli {i}", "--json"))
                mine[int(t["id"][1:])] = [t["content"], "pending", "medium"]
            elif (i // 40) % 2:
                num = sorted(mine)[(i // 80) % len(mine)]
                new = {"high": "medium", "medium": "low", "low": "high"}[mine[num][2]]
                cli("prio", f"t{num}", new)
                mine[num][2] = new
            else:
                num = sorted(mine)[(i // 80) % len(mine)]
                done = mine[num][1] == "in_progress"
                cli("done" if done else "start", f"t{num}")
                mine[num][1] = "completed" if done else "in_progress"
            events += 1
        elif i % 4 == 0 or not mine:
            if len(mine) < 25:
                t = todos.add(store, shared, f"w{w} item {i}", priority="HML"[i % 3])
                mine[t.num] = [t.content, "pending", t.priority]
            else:
                num = sorted(mine)[(i // 4) % len(mine)]
                mine[num][0] = f"w{w} item edited at {i}"
                assert todos.edit(store, shared, num, mine[num][0]).changed
            events += 1
        elif i % 4 == 1:
            num = sorted(mine)[(i // 4) % len(mine)]
            new = statuses[(statuses.index(mine[num][1]) + 1) % 3]
            assert todos.set_status(store, shared, num, new).changed, (num, new)
            mine[num][1] = new
            events += 1
        elif i % 4 == 2:
            if len(own_list) < 25:
                own_list.append({"content": f"w{w} step {len(own_list)}",
                                 "status": "pending", "priority": "medium"})
            else:
                item = own_list[(i // 4) % 25]
                item["status"] = "completed" if item["status"] != "completed" else "pending"
            r = todowrite(store, own, formats.parse({"todos": own_list}),
                          actor=f"agent:w{w}")
            assert r.events == 1, r.events
            events += r.events
        else:
            # Agents sharing one session: each omission removes the others' items.
            plan = [{"content": f"agent w{w} task {(i // 4 + k) % 5}",
                     "status": statuses[(i + k) % 3], "priority": "low"} for k in range(3)]
            r = todowrite(store, shared, formats.parse({"todos": plan}), actor=f"agent:w{w}")
            events += r.events
    store.close()
    print(json.dumps({"events": events, "mine": mine, "own": own_list}))
""")


def _fold(events: list) -> SessionState:
    st = SessionState(session_id=events[0].session_id)
    for ev in events:
        apply(st, ev)
    return st


def test_four_processes_of_concurrent_writers(tmp_path: Path, pg_url: str) -> None:
    store = Store.open(pg_url)
    shared = store.create_session("shared", actor="human")
    own = [store.create_session(f"own{w}", actor="human") for w in range(WORKERS)]
    setup_events = 1 + WORKERS
    go = tmp_path / "go"
    env = {"PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, pg_url, str(w), str(CHANGES),
                               str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env) for w in range(WORKERS)]
    # While they write, a reader must never see a gap: seq commits in order, under the lock.
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def watch_gaps() -> None:
        engine = create_engine(pg_url)
        with engine.connect() as conn:
            while not stop.is_set():
                seen.append(tuple(conn.execute(text(
                    "SELECT count(*), COALESCE(max(seq), 0) FROM events")).one()))
                conn.rollback()
                time.sleep(0.01)
        engine.dispose()

    reader = threading.Thread(target=watch_gaps)
    reader.start()
    go.touch()
    reports = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, err.decode()[-3000:]
            reports.append(json.loads(out))
    finally:
        stop.set()
        reader.join()

    # No lost or duplicated event: the store holds exactly what the workers wrote, and
    # seq is 1..N with no gap (so also no duplicate), n is 1..k per session.
    events = store.events()
    written = setup_events + sum(r["events"] for r in reports)
    assert len(events) == written
    assert [e.seq for e in events] == list(range(1, written + 1))
    by_session: dict[int, list] = {}
    for e in events:
        by_session.setdefault(e.session_id, []).append(e)
    for sid, evs in by_session.items():
        assert [e.n for e in evs] == list(range(1, len(evs) + 1)), sid
    assert len(seen) > 10 and all(count == top for count, top in seen), \
        [s for s in seen if s[0] != s[1]][:5]

    # The projections equal a rebuild from events, and replay at the end equals the live
    # state, for every session.
    for sid in [shared, *own]:
        folded = _fold(by_session[sid])
        live = store.projection_state(sid)
        assert folded.to_json() == live.to_json(), sid
        assert store.state_at(sid).to_json() == live.to_json(), sid

    # Nothing a worker did was lost: its people's items (API and CLI) with their last
    # text, status and priority, and its agent's own list exactly as last sent.
    current = {t.num: t for t in store.todos(shared)}
    people = {num for num, t in current.items() if t.origin == "human"}
    assert people == {int(num) for r in reports for num in r["mine"]}
    for w, r in enumerate(reports):
        for num, (content, status, priority) in r["mine"].items():
            t = current[int(num)]
            assert (t.content, t.status, t.priority) == (content, status, priority)
        own_todos = sorted(store.todos(own[w]), key=lambda t: t.position)
        assert [(t.content, t.status) for t in own_todos] == \
            [(i["content"], i["status"]) for i in r["own"]]
    # Replay at a midpoint equals the fold of the events up to it.
    mid = len(by_session[shared]) // 2
    assert store.state_at(shared, mid).to_json() == _fold(by_session[shared][:mid]).to_json()
    store.close()


def test_fresh_store_opened_by_many_at_once(pg_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = ("import sys, time; from pathlib import Path; from state.store import Store\n"
              "while not Path(sys.argv[2]).exists(): time.sleep(0.001)\n"
              "s = Store.open(sys.argv[1]); s.close(); print('ok')")
    procs = [subprocess.Popen([sys.executable, "-c", script, pg_url, str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={"PYTHONPATH": str(ROOT)}) for _ in range(4)]
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == b"ok", err.decode()[-2000:]
    with Store.open(pg_url) as s:
        assert s.applied_migrations() == [name for name, _ in migrations.MIGRATIONS]


def test_writer_waits_for_the_lock_then_says_locked(pg_url: str, pg_cluster: PgCluster,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli(["--db", pg_url, "add", "existing"]).code == 0
    before = run_cli(["--db", pg_url, "log", "--json"]).out
    monkeypatch.setenv("HARNESS_BUSY_TIMEOUT_MS", "300")
    holder = psycopg.connect(pg_url.replace("+psycopg", ""))
    holder.execute(f"SELECT pg_advisory_xact_lock({PG_WRITE_LOCK_KEY})")
    try:
        t0 = time.monotonic()
        r = run_cli(["--db", pg_url, "add", "must wait"])
        assert time.monotonic() - t0 >= 0.3
    finally:
        holder.rollback()
        holder.close()
    assert r.code == 3, r.err
    assert r.err.startswith("error: ") and "database is locked" in r.err
    assert run_cli(["--db", pg_url, "log", "--json"]).out == before
    assert run_cli(["--db", pg_url, "add", "now it can"]).code == 0


def test_kept_writer_survives_a_dropped_connection(pg_url: str, pg_cluster: PgCluster) -> None:
    with Store.open(pg_url) as s:
        sid = s.create_session("s", actor="human")
        todos.add(s, sid, "before")
        pid = s._writer_conn.dbapi_connection.info.backend_pid
        pg_cluster.sql(f"SELECT pg_terminate_backend({pid})")
        time.sleep(0.1)
        todos.add(s, sid, "after the server dropped our connection")
        assert [t.content for t in s.todos(sid)][-1].startswith("after")
        assert s._writer_conn.dbapi_connection.info.backend_pid != pid


def test_watch_reconnects_after_a_dropped_connection(pg_url: str,
                                                    pg_cluster: PgCluster) -> None:
    with Store.open(pg_url) as reader, Store.open(pg_url) as writer, reader.watch() as watch:
        sid = writer.create_session("s", actor="human")
        assert watch.changed()
        pg_cluster.sql(f"SELECT pg_terminate_backend({watch._conn.info.backend_pid})")
        todos.add(writer, sid, "while the watch was cut off")
        # The loss shows within a poll or two; it may have missed a notification, so it
        # reports a change once it has reconnected.
        assert _within(watch.changed, polls=3)
        assert not watch.changed()
        todos.add(writer, sid, "after the drop")
        assert _within(watch.changed, polls=500)


def _within(check: Callable[[], bool], polls: int) -> bool:
    for _ in range(polls):
        if check():
            return True
        time.sleep(0.01)
    return False


def grants_from_docs(dbname: str) -> list[str]:
    """The SQL between `-- begin grants` and `-- end grants` in docs/teams.md."""
    doc = (ROOT / "docs" / "teams.md").read_text()
    block = doc.split("-- begin grants\n", 1)[1].split("-- end grants", 1)[0]
    return [stmt.strip().replace(" campaign ", f" {dbname} ")
            for stmt in block.split(";") if stmt.strip()]


def test_roles_decide_who_may_write_what(pg_url: str, pg_cluster: PgCluster) -> None:
    """The grants of docs/teams.md: a watcher reads; an agent changes the todo list but
    not runs; a writer does everything but rewrite history."""
    with Store.open(pg_url) as owner:
        sid = owner.create_session("default", actor="human")
        todos.add(owner, sid, "set up by the owner")
    db = pg_url.rsplit("/", 1)[1]
    for stmt in grants_from_docs(db):
        pg_cluster.sql(stmt, dbname=db)
    for user, group in (("watcher", "harness_read"), ("bot", "harness_agent"),
                        ("alice", "harness_write")):
        pg_cluster.sql(f"CREATE ROLE {user} LOGIN IN ROLE {group}", dbname=db)
    as_ = {u: pg_url.replace("harness@", f"{u}@") for u in ("watcher", "bot", "alice")}

    listing = run_cli(["--db", as_["watcher"], "list", "--json"])
    assert listing.code == 0, listing.err
    assert [t["content"] for t in json.loads(listing.out)] == ["set up by the owner"]
    r = run_cli(["--db", as_["watcher"], "add", "sneaky"])
    assert r.code == 1 and "not allowed" in r.err and "docs/teams.md" in r.err
    assert len(r.err.strip().splitlines()) == 1

    r = run_cli(["--db", as_["bot"], "todowrite"],
                '{"todos":[{"content":"agent work","status":"in_progress"}]}')
    assert r.code == 0, r.err
    assert run_cli(["--db", as_["bot"], "session", "new", "mine"]).code == 1
    # Agents claim with leases and heartbeat; a watcher's read of a lease that ran out
    # shows it, writing nothing (it may not); the agent's late heartbeat ends it.
    r = run_cli(["--db", as_["bot"], "next", "--claim", "--lease", "0.3s", "--actor", "w1"])
    assert r.code == 0 and r.out.startswith("claimed t1 "), r.err
    with Store.open(as_["watcher"]) as watcher:
        while True:
            now, leases = watcher.leases(sid)
            if leases[1].left(now) <= 0:
                break
            time.sleep(0.05)
        n = watcher.last_n(sid)
        listing = run_cli(["--db", as_["watcher"], "list"])
        assert listing.code == 0 and "claimed by w1 · lease ran out" in listing.out, listing
        assert watcher.last_n(sid) == n
    r = run_cli(["--db", as_["bot"], "heartbeat", "--actor", "w1"])
    assert r.code == 1 and r.err.startswith("refused: t1: lease of agent:w1 ran out"), r.err
    with Store.open(as_["bot"]) as agent:
        # A run is a projection the agent may not write: the whole transaction goes.
        n = agent.last_n(sid)
        with pytest.raises(StoreError, match="not allowed"), \
                agent.write(sid, "agent:x") as tx:
            tx.create_todo("with a run")
            tx.queue_run(todo_id=None, host="local")
        assert agent.last_n(sid) == n
        assert [t.content for t in agent.todos(sid)] == ["set up by the owner", "agent work"]

    with Store.open(as_["alice"]) as alice:
        new = alice.create_session("alice's", actor="human")
        with alice.write(new, "runner") as tx:
            t = tx.create_todo("train")
            run = tx.queue_run(todo_id=t.num, host="gpu")
            tx.update_run(run.id, state="succeeded", exit_code=0)
            tx.append_log(run.id, 0, "done\n")
            tx.record_artifact(todo_id=t.num, run_id=run.id, path="/m", size=3, kind="file")
            tx.record_verification(todo_id=t.num, run_id=run.id, kind="checkpoint",
                                   passed=True, verdict="ok", checks=[], metrics={}, gate={})
            tx.set_session_pipeline("eagle3.yaml")
        assert [r.state for r in alice.runs(new)] == ["succeeded"]
    with psycopg.connect(as_["alice"].replace("+psycopg", "")) as conn:
        for stmt in ("DELETE FROM events", "UPDATE events SET actor = 'nobody'",
                     "DELETE FROM snapshots"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt)
            conn.rollback()


def test_user_who_may_not_migrate_is_told_who_can(pg_cluster: PgCluster) -> None:
    url = pg_cluster.create_database()
    pg_cluster.sql("CREATE ROLE latecomer LOGIN")
    r = run_cli(["--db", url.replace("harness@", "latecomer@"), "list"])
    assert r.code == 1, r.err
    assert f"needs {len(migrations.MIGRATIONS)} migration" in r.err
    assert "harness db upgrade" in r.err


def test_password_is_never_printed_or_saved(pg_url: str, tmp_path: Path) -> None:
    url = pg_url.replace("harness@", "harness:s3cret-pw@")
    assert run_cli(["--db", url, "session", "new", "campaign"]).code == 0
    where = run_cli(["--db", url, "where", "--json"])
    assert where.code == 0 and json.loads(where.out)["session"] == "campaign"
    info = run_cli(["--db", url, "db", "info"])
    saved = (tmp_path / "config" / "sessions.json").read_text()
    for text_ in (where.out, info.out, saved):
        assert "s3cret-pw" not in text_ and "127.0.0.1" in text_
