"""The store survives its server: a PostgreSQL restart or a network cut costs a wait, never
a failed command, a lost write or a duplicate (docs/ARCHITECTURE.md, "Reliability").

The server is the suite's real PostgreSQL; the cuts come from a loopback TCP proxy in
front of it (tests/tcp_proxy.py). Budgets are a few seconds here (``HARNESS_RETRY_S``),
the cuts shorter, so the suite stays quick; the behaviour is the same at 30 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import todos
from harness.agents import spool
from state import retry
from state.store import Store
from tests.conftest import ROOT, run_cli
from tests.pg import PgCluster
from tests.tcp_proxy import CutProxy


@pytest.fixture
def proxy(pg_cluster: PgCluster) -> Iterator[CutProxy]:
    if pg_cluster.external:
        pytest.skip("needs the suite's own PostgreSQL (a proxy in front, a restart)")
    with CutProxy(pg_cluster.port) as p:
        yield p


@pytest.fixture
def cut_url(pg_url: str, pg_cluster: PgCluster, proxy: CutProxy,
            monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh database reached through the proxy (also HARNESS_DB), its schema made."""
    url = pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/")
    monkeypatch.setenv("HARNESS_DB", url)
    monkeypatch.setenv("HARNESS_RETRY_S", "20")
    Store.open(url).close()
    return url


def contents(url: str) -> list[str]:
    with Store.open(url) as s:
        sess = s.session_by_name("default")
        return [] if sess is None else [t.content for t in s.todos(sess.id)]


def harness_proc(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                               **env}, capture_output=True, text=True, timeout=120)


def test_writers_ride_out_two_cuts_and_a_restart(cut_url: str, proxy: CutProxy,
                                                  pg_cluster: PgCluster) -> None:
    """Three writers run `harness add` in a loop while the network is cut twice and the
    server restarted: every command succeeds, each acknowledged todo is stored once."""
    stop = threading.Event()
    done: list[tuple[str, subprocess.CompletedProcess]] = []

    def writer(w: int) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            text = f"w{w}-{k}"
            done.append((text, harness_proc(["add", text])))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        proxy.cut(1.5, wait=True)
        time.sleep(0.5)
        pg_cluster.restart()
        time.sleep(0.5)
        proxy.cut(1.5, wait=True)
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join()
    failed = [(text, r.returncode, r.stderr) for text, r in done if r.returncode != 0]
    assert not failed
    stored = contents(cut_url)
    assert sorted(stored) == sorted(text for text, _ in done)  # none lost, none twice
    assert proxy.cuts == 2


def test_a_retry_whose_commit_had_landed_writes_nothing_twice(cut_url: str,
                                                              proxy: CutProxy) -> None:
    """The COMMIT reaches the server, its answer never reaches us: the command runs
    again, finds its write's key stored, and answers as the first attempt would have."""
    assert run_cli(["add", "first"]).code == 0
    proxy.drop_after_commit()
    r = run_cli(["add", "landed unseen", "-p", "high"])
    assert proxy.commits_cut == 1  # the cut happened, after the server committed
    assert r.code == 0, r.err
    assert "t2" in r.out  # the id the landed write took, not a third todo
    assert contents(cut_url) == ["first", "landed unseen"]
    # An agent's claim: the same todo, claimed once.
    proxy.drop_after_commit()
    r = run_cli(["next", "--claim", "--actor", "agent:a", "--json"])
    assert proxy.commits_cut == 2
    assert r.code == 0, r.err
    assert json.loads(r.out)["todo"]["id"] == "t2"
    with Store.open(cut_url) as s:
        sid = s.session_by_name("default").id
        claims = [e for e in s.events(sid) if e.kind == "todo.updated"]
    assert len(claims) == 1


def test_one_operation_run_twice_lands_once(store: Store) -> None:
    """The same path on both backends: a second run of an operation whose writes are
    stored (a retry, a spooled hook call sent again) replays them and writes nothing."""
    sid = store.create_session("s", actor="human")

    def work() -> tuple[str, str]:
        a = todos.add(store, sid, "one", actor="human")
        b = todos.add(store, sid, "two", actor="human")
        return a.id, b.id

    first = retry.run(work, op_id="op-twice")
    again = retry.run(work, op_id="op-twice", replay=True)
    assert again == first == ("t1", "t2")
    assert [t.content for t in store.todos(sid)] == ["one", "two"]
    assert len(store.events(sid)) == 3  # session.created and the two todos


def test_a_cut_longer_than_the_budget_ends_in_one_line(cut_url: str, proxy: CutProxy,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    assert run_cli(["add", "before the cut"]).code == 0
    monkeypatch.setenv("HARNESS_RETRY_S", "1.5")
    proxy.cut(6.0)
    r = run_cli(["add", "during the cut"])
    assert r.code == 3
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.err
    assert "gave up after 1.5 s of retries: `harness add` was not written" in lines[0]
    assert "cannot use the database" in lines[0]
    proxy.cut(0.0)  # back
    time.sleep(0.2)
    assert contents(cut_url) == ["before the cut"]  # nothing acknowledged was lost


def test_a_silent_server_is_not_waited_on_for_ever(cut_url: str, proxy: CutProxy,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections that stay open while nothing answers (a middlebox that lost its
    upstream, a frozen server host): a command ends with the one-line error within its
    budget, on a new connection (the connect) and on an open one (a statement's answer:
    what used to be waited on for ever)."""
    assert harness_proc(["add", "before"]).returncode == 0
    monkeypatch.setenv("HARNESS_RETRY_S", "1")
    with Store.open(cut_url) as store:
        sid = store.session_by_name("default").id
        todos.add(store, sid, "open connection", actor="human")
        proxy.stall()
        try:
            r = harness_proc(["add", "silent"])
            found: list[BaseException] = []
            seen: list[BaseException] = []

            def write() -> None:
                try:
                    retry.run(lambda: todos.add(store, sid, "silent too", actor="human"),
                              on_retry=seen.append)
                except BaseException as exc:
                    found.append(exc)
            t = threading.Thread(target=write)
            t.start()
            t.join(60)
            assert not t.is_alive(), "a write waited on a silent server"
        finally:
            proxy.stall(False)
    assert r.returncode == 3, r.stderr
    assert "timeout expired" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "gave up after 1 s" in str(found[0]) and seen


def test_the_mcp_server_rides_out_a_restart_and_a_cut(cut_url: str, proxy: CutProxy,
                                                      pg_cluster: PgCluster) -> None:
    from tests.agents.mcp_client import data, mcp_session

    async def go() -> list[str]:
        async with mcp_session(cut_url) as s:  # type: ignore[arg-type]  (a URL)
            data(await s.call_tool("todowrite", {"todos": [
                {"content": "a", "status": "pending"}]}))
            pg_cluster.restart()
            data(await s.call_tool("todowrite", {"todos": [
                {"content": "a", "status": "in_progress"}, {"content": "b",
                                                             "status": "pending"}]}))
            proxy.cut(1.0)
            got = data(await s.call_tool("todo_update", {"id": "t2", "status": "completed"}))
            return [got["todo"]["status"]]

    assert asyncio.run(go()) == ["completed"]
    with Store.open(cut_url) as s:
        sid = s.session_by_name("default").id
        assert {t.content: t.status for t in s.todos(sid)} == {"a": "in_progress",
                                                               "b": "completed"}


def test_a_pipeline_run_rides_out_a_cut(cut_url: str, proxy: CutProxy, tmp_path: Path) -> None:
    """A cut of the store's network in mid-run: every stage completes, each launched
    once, and the run ends well."""
    from tests.runner.test_runner import in_thread, make_runner, write_spec

    spec = write_spec(tmp_path / "p.yaml", [
        {"name": f"s{i}", "run": f"sleep 0.4; echo s{i} >> {tmp_path}/launches",
         **({"needs": [f"s{i - 1}"]} if i else {})} for i in range(4)])
    with Store.open(cut_url) as store:
        runner = make_runner(store, spec)
        t = in_thread(runner)
        time.sleep(0.8)
        proxy.cut(1.5)
        t.join(120)
        assert not t.is_alive() and runner.error is None, (runner.error, runner.lines)
        sid = store.session_by_name("s").id
        runs = store.runs(sid)
        assert sorted(r.stage for r in runs) == ["s0", "s1", "s2", "s3"]  # one run each
        assert all(r.state == "succeeded" for r in runs)
        assert {t.status for t in store.todos(sid)} == {"completed"}
    assert sorted((tmp_path / "launches").read_text().split()) == ["s0", "s1", "s2", "s3"]
    assert proxy.cuts == 1


def _claude_todowrite(items: list[tuple[str, str]], cwd: Path) -> str:
    return json.dumps({"hook_event_name": "PostToolUse", "tool_name": "TodoWrite",
                       "session_id": "sess-1", "cwd": str(cwd),
                       "tool_input": {"todos": [{"content": c, "status": s,
                                                 "activeForm": c} for c, s in items]}})


def test_a_hook_spools_while_the_store_is_away_and_the_next_call_sends_it(
        cut_url: str, proxy: CutProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_RETRY_S", "1")
    monkeypatch.setenv("HARNESS_SESSION", "default")
    proxy.cut(600.0)
    r = run_cli(["hook", "claude-code"], _claude_todowrite([("plan a", "pending")], tmp_path))
    assert r.code == 0  # never fails the agent
    assert "the store is unreachable" in r.err and "(1 waiting)" in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert len(spool.waiting()) == 1
    # A second call while still away joins the queue behind the first.
    r = run_cli(["hook", "claude-code"], _claude_todowrite(
        [("plan a", "completed"), ("plan b", "pending")], tmp_path))
    assert "(2 waiting)" in r.err
    doctor = run_cli(["doctor"])
    assert "spool: 2 hook call(s)" in doctor.out
    proxy.cut(0.0)  # back
    time.sleep(0.2)
    r = run_cli(["hook", "claude-code"], _claude_todowrite(
        [("plan a", "completed"), ("plan b", "in_progress")], tmp_path))
    assert r.code == 0 and "unreachable" not in r.err, r.err
    assert spool.waiting() == []
    assert "spool" not in run_cli(["doctor"]).out
    with Store.open(cut_url) as s:
        sid = s.session_by_name("default").id
        assert {t.content: t.status for t in s.todos(sid)} == {"plan a": "completed",
                                                               "plan b": "in_progress"}
        # In order: a created (first call), a done and b created (second), b started.
        changes = [(e.kind, e.todo_id) for e in s.events(sid) if e.kind.startswith("todo.")]
    assert changes[0] == ("todo.created", 1) and changes[-1] == ("todo.updated", 2)
    assert sorted(changes[1:3]) == [("todo.created", 2), ("todo.updated", 1)]
    assert len(changes) == 4


@pytest.mark.sqlite
def test_a_spooled_call_is_sent_once_on_sqlite(db_url: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool's forwarding on SQLite: a call kept there (as an unreachable server
    leaves it) lands once, before the new call, even when it had landed already."""
    monkeypatch.setenv("HARNESS_SESSION", "default")
    monkeypatch.chdir(tmp_path)
    # A context cut is written each time it is told (unlike a list, which merges).
    cut = json.dumps({"hook_event_name": "PreCompact", "trigger": "manual",
                      "session_id": "sess-1", "cwd": str(tmp_path)})
    call = spool.new_call("claude-code", cut, db=None, session=None, actor=None, event=None)
    from harness.cli.hot import hook_call

    retry.run(lambda: hook_call(call), op_id=call["op"])  # it had landed, unseen
    spool_file = spool.spool_path()
    spool_file.parent.mkdir(parents=True)
    spool_file.write_text(json.dumps(call) + "\n")
    r = run_cli(["hook", "claude-code"], _claude_todowrite([("kept", "pending")], tmp_path))
    assert r.code == 0 and not r.err, r.err
    assert spool.waiting() == []
    with Store.open(db_url) as s:
        sid = s.session_by_name("default").id
        assert [e.kind for e in s.events(sid)] == ["session.created", "agent.context",
                                                   "todo.created"]
