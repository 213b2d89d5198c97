"""`harness next --claim` and the MCP tool `claim_next`: atomic claims by parallel agents,
with real processes racing on the real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio

from state.store import Store
from tests.agents.mcp_client import data, mcp_session
from tests.conftest import ROOT

# Each racer imports the CLI, says it is ready, then waits for the start signal on stdin:
# the claims themselves start together, not the interpreters.
RACER = ("import sys; from harness.cli.main import main; "
         "sys.stderr.write('ready\\n'); sys.stderr.flush(); sys.stdin.read(1); "
         "main(['next', '--claim', '--actor', sys.argv[1], '--json'])")


def seed(store: Store) -> int:
    sid = store.create_session("default", actor="human")
    with store.write(sid, "human") as tx:
        for i in range(5):
            tx.create_todo(f"ready {i}", priority=("high", "medium", "low")[i % 3])
        done = tx.create_todo("done already", status="completed")
        first = tx.create_todo("waits on an open one")
        tx.update_todo(first.num, depends_on=[1])
        tx.create_todo("a pipeline stage", stage="train")
        tx.create_todo("blocked", status="blocked", blocked_reason="no GPU")
        tx.create_todo("after the done one", depends_on=[done.num], status="in_progress")
    return sid


def test_eight_processes_race_for_five_ready_todos(db_url: str, tmp_path: Path) -> None:
    with Store.open(db_url) as store:
        sid = seed(store)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": db_url}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, f"w{i}"], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for i in range(8)]
    try:
        for p in procs:
            assert p.stderr is not None and p.stderr.readline() == b"ready\n"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go")
            p.stdin.close()
        results = [(p.wait(timeout=120), p.stdout.read()) for p in procs]  # type: ignore[union-attr]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    answers = [(code, json.loads(out)) for code, out in results]
    claimed = [a["todo"]["id"] for code, a in answers if code == 0]
    nothing = [a for code, a in answers if code == 1]
    assert sorted(claimed) == ["t1", "t2", "t3", "t4", "t5"]  # each exactly once
    assert len(nothing) == 3 and all(a["todo"] is None and a["reason"].startswith(
        "nothing is ready") for a in nothing)
    assert all(a["claimed"] for code, a in answers if code == 0)
    with Store.open(db_url) as store:
        claims = [e for e in store.events(sid, kinds=["todo.updated"])
                  if e.payload["changes"].get("status") == ["pending", "in_progress"]]
        todos = {t.num: t for t in store.todos(sid)}
    assert len(claims) == 5
    assert len({e.actor for e in claims}) == 5 and all(e.actor.startswith("agent:w")
                                                       for e in claims)
    assert all(todos[n].status == "in_progress" for n in range(1, 6))


def test_next_picks_the_highest_priority_ready_todo(cli, db_url: str) -> None:
    with Store.open(db_url) as store:
        seed(store)
    r = cli(["next"])
    assert r.code == 0 and r.out.startswith("next t1 (high) ready 0"), r.out
    assert cli(["next", "--json"]).out == cli(["next", "--json"]).out  # asking claims nothing
    r = cli(["next", "--claim", "--actor", "w1"])
    assert r.code == 0 and r.out.strip() == "claimed t1 (high) ready 0"
    order = [cli(["next", "--claim"]).out.split()[1] for _ in range(4)]
    assert order == ["t4", "t2", "t5", "t3"]  # high, medium, medium, low (board order within)
    r = cli(["next", "--claim"])
    assert r.code == 1
    assert r.out.strip() == "nothing is ready (1 waiting on dependencies, 6 in progress, " \
                            "1 blocked)"


def test_claim_next_over_mcp_marks_it_the_clients(db_path: Path) -> None:
    with Store.open(str(db_path)) as store:
        sid = seed(store)

    async def go() -> list[dict]:
        out = []
        async with mcp_session(db_path, client="worker-a") as a, \
                mcp_session(db_path, client="worker-b") as b:
            for s in (a, b, a):
                out.append(data(await s.call_tool("claim_next", {})))
        return out

    got = anyio.run(go)
    assert [g["todo"]["id"] for g in got] == ["t1", "t4", "t2"]
    with Store.open(str(db_path)) as store:
        actors = [e.actor for e in store.events(sid, kinds=["todo.updated"])
                  if e.payload["changes"].get("status") == ["pending", "in_progress"]]
    assert actors == ["agent:worker-a", "agent:worker-b", "agent:worker-a"]
