"""Replay equals what the live projection held; rebuild; the replay CLI; the example."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from harness import formats, replay
from harness import todos as uc
from harness.agents.todolist import todowrite
from harness.errors import HarnessError
from state import tx as tx_mod
from state.maintain.rebuild import rebuild
from state.store import Store
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "kimi-k25-campaign.jsonl"

TEXTS = ["train drafter", "Train drafter", "verify checkpoint", "serve with vLLM",
         "benchmark acceptance", "patch whitelist", "pivot to SGLang", "build vocab map"]

command = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(TEXTS), st.sampled_from(["high", "low", "M"])),
    st.tuples(st.just("status"), st.integers(0, 9),
              st.sampled_from(["in_progress", "completed", "blocked", "cancelled", "pending"])),
    st.tuples(st.just("unblock"), st.integers(0, 9)),
    st.tuples(st.just("prio"), st.integers(0, 9), st.sampled_from(["high", "up", "down"])),
    st.tuples(st.just("move"), st.integers(0, 9), st.sampled_from(["up", "down", "to1"])),
    st.tuples(st.just("edit"), st.integers(0, 9), st.sampled_from(TEXTS)),
    st.tuples(st.just("note"), st.integers(0, 9)),
    st.tuples(st.just("depend"), st.integers(0, 9), st.integers(0, 9)),
    st.tuples(st.just("agent"), st.sampled_from(["opencode", "claude", "codex"]),
              st.lists(st.tuples(st.sampled_from(TEXTS),
                                 st.sampled_from(["pending", "in_progress", "completed"])),
                       max_size=5, unique_by=lambda x: x[0])),
)


def _agent_payload(fmt: str, items: list[tuple[str, str]]) -> dict:
    if fmt == "codex":
        return {"plan": [{"step": c, "status": s} for c, s in items]}
    if fmt == "claude":
        return {"todos": [{"content": c, "status": s, "activeForm": c + "ing"}
                          for c, s in items]}
    return {"todos": [{"content": c, "status": s, "priority": "high"} for c, s in items]}


def _run(store: Store, sid: int, cmd: tuple) -> None:
    nums = sorted(t.num for t in store.todos(sid))
    pick = (lambda i: nums[i % len(nums)]) if nums else None
    kind = cmd[0]
    try:
        if kind == "add":
            uc.add(store, sid, cmd[1], priority=cmd[2])
        elif kind == "agent":
            fmt = cmd[1]
            todowrite(store, sid, formats.parse(_agent_payload(fmt, cmd[2]), fmt),
                      actor=f"agent:{fmt}", sees_response=fmt != "codex")
        elif pick is None:
            return
        elif kind == "status":
            uc.set_status(store, sid, pick(cmd[1]), cmd[2], reason="stuck")
        elif kind == "unblock":
            uc.unblock(store, sid, pick(cmd[1]))
        elif kind == "prio":
            uc.set_priority(store, sid, pick(cmd[1]), cmd[2])
        elif kind == "move":
            uc.move(store, sid, pick(cmd[1]), up=cmd[2] == "up", down=cmd[2] == "down",
                    to=1 if cmd[2] == "to1" else None)
        elif kind == "edit":
            uc.edit(store, sid, pick(cmd[1]), cmd[2])
        elif kind == "note":
            uc.note(store, sid, pick(cmd[1]), "a note")
        elif kind == "depend":
            uc.set_depends(store, sid, pick(cmd[1]), [pick(cmd[2])])
    except HarnessError:
        pass  # a refused command (a dependency cycle) changes nothing, as live


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cmds=st.lists(command, min_size=1, max_size=25), every=st.sampled_from([1, 3, 7]))
def test_replay_at_every_event_equals_the_live_projection(
        cmds: list[tuple], every: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tx_mod, "SNAPSHOT_EVERY", every)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(str(Path(tmp) / "s.db"))
        try:
            sid = store.create_session("p", actor="human")
            seen = {store.last_n(sid): store.projection_state(sid).to_json()}
            for cmd in cmds:
                _run(store, sid, cmd)
                seen[store.last_n(sid)] = store.projection_state(sid).to_json()
            last = store.last_n(sid)
            for n, live in seen.items():
                assert store.state_at(sid, n).to_json() == live, (n, cmds)
            for n in range(1, last + 1):  # events inside one command fold too
                assert replay.list_at(store, sid, n).n == n
            steps = list(replay.steps(store, sid))
            assert [s.n for s in steps] == list(range(1, last + 1))
            assert sorted(t.num for t in steps[-1].todos) == \
                sorted(t["num"] for t in seen[last]["todos"])
            report = rebuild(store, check=True)
            assert report.differences == []
        finally:
            store.close()


def _session(store: Store) -> int:
    sid = store.create_session("s", actor="human")
    a = uc.add(store, sid, "generate data", priority="high").num
    b = uc.add(store, sid, "train", depends_on=[a]).num
    uc.set_status(store, sid, a, "completed")
    uc.set_status(store, sid, b, "blocked", reason="acceptance 15%")
    uc.add(store, sid, "serve with SGLang")
    return sid


def test_snapshots_every_k_events_even_in_one_big_transaction(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tx_mod, "SNAPSHOT_EVERY", 16)
    sid = store.create_session("big", actor="human")
    with store.write(sid, "human") as tx:
        for i in range(20):
            tx.create_todo(f"item {i}")
        for i in range(200):
            tx.update_todo(1 + i % 20, content=f"item {i} v2")
            if i == 100:
                tx.flush()  # a long writer may flush; it is still one transaction
    with store.engine.connect() as conn:
        snaps = [r[0] for r in conn.execute(
            text("SELECT n FROM snapshots WHERE session_id = :s ORDER BY n"), {"s": sid})]
    assert snaps == list(range(16, 222, 16))
    assert rebuild(store, check=True).differences == []


def test_rebuild_reports_and_repairs_a_damaged_projection(cli, store: Store,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(tx_mod, "SNAPSHOT_EVERY", 4)
    sid = _session(store)
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=2, host="local", stage="train")
        tx.update_run(run.id, state="failed", exit_code=1)
        tx.record_verification(todo_id=2, run_id=run.id, passed=False, verdict="15%")
    clean = cli(["rebuild", "--check"])
    assert clean.code == 0 and "0 difference(s)" in clean.out
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE todos SET status = 'completed' WHERE num = 2")
        conn.exec_driver_sql("DELETE FROM todos WHERE num = 3")
        conn.exec_driver_sql("UPDATE runs SET state = 'succeeded'")
        conn.exec_driver_sql("UPDATE snapshots SET state = '{}' WHERE n = 4")
    bad = cli(["rebuild", "--check"])
    assert bad.code == 1
    assert "session s: todo t2: status stored 'completed', events say 'blocked'" in bad.out
    assert "session s: todo t3: missing from the projection" in bad.out
    assert "session s: run r1: state stored 'succeeded', events say 'failed'" in bad.out
    assert "session s: snapshot at 4: differs from the fold of events 1..4" in bad.out
    assert store.todo(sid, 2).status == "completed"  # --check changes nothing
    fixed = cli(["rebuild"])
    assert fixed.code == 0 and "the projections now follow the events" in fixed.out
    assert store.todo(sid, 2).status == "blocked"
    assert cli(["rebuild", "--check", "--json"]).code == 0
    # The writer's cached copy of the list is dropped, so the next write sees the repair.
    uc.add(store, sid, "after the rebuild")
    assert {t.num for t in store.todos(sid)} == {1, 2, 3, 4}


def test_replay_cli_at_time_steps_diff(cli, store: Store) -> None:
    sid = _session(store)
    events = store.events(sid)
    at3 = cli(["-s", "s", "replay", "--at", "3"])
    assert at3.code == 0
    assert "session s at event 3 of 6" in at3.out and "train" in at3.out
    assert "serve with SGLang" not in at3.out
    js = json.loads(cli(["-s", "s", "replay", "--at", "5", "--json"]).out)
    assert js["n"] == 5 and [t["status"] for t in js["todos"]] == ["blocked", "completed"]
    t = cli(["-s", "s", "replay", "--time", events[3].ts, "--json"])
    assert json.loads(t.out)["n"] == 4
    before = cli(["-s", "s", "replay", "--time", "2000-01-01", "--json"])
    assert json.loads(before.out)["n"] == 0 and json.loads(before.out)["todos"] == []
    steps = cli(["-s", "s", "replay", "--steps"]).out.splitlines()
    assert steps[0].startswith("#1 ") and "created session 's'" in steps[0]
    assert any("status: pending -> blocked" in line for line in steps)
    assert steps[-1].strip().startswith("○t3") and "(1/3 done)" in steps[-1]
    sj = json.loads(cli(["-s", "s", "replay", "--steps", "--from", "5", "--json"]).out)
    assert [s["n"] for s in sj] == [5, 6] and sj[1]["todo_id"] == "t3"
    d = cli(["-s", "s", "replay", "--diff", "3", "6"])
    assert "event 3 -> event 6: 3 events (human ×3)" in d.out
    assert "+ t3" in d.out and "~ t1" in d.out and "status 'pending' -> 'completed'" in d.out
    dj = json.loads(cli(["-s", "s", "replay", "--diff", "6", "3", "--json"]).out)
    assert [r["id"] for r in dj["removed"]] == ["t3"]


def test_replay_bad_points_are_usage_errors(cli, store: Store) -> None:
    _session(store)
    r = cli(["-s", "s", "replay", "--at", "99"])
    assert r.code == 2 and "out of range: the session has events 1..6" in r.err
    r = cli(["-s", "s", "replay", "--time", "yesterday"])
    assert r.code == 1 and "not a time: 'yesterday'" in r.err
    r = cli(["-s", "s", "replay", "--at", "2", "--time", "2026-01-01"])
    assert r.code == 2
    r = cli(["-s", "s", "replay", "--fork", "x"])
    assert r.code == 2 and "--fork needs --at" in r.err


def test_fork_starts_a_child_session_from_an_old_moment(cli, store: Store) -> None:
    sid = _session(store)
    r = cli(["-s", "s", "replay", "--fork", "retry", "--at", "5"])
    assert r.code == 0 and "forked session retry from s at event 5: 2 todos" in r.out
    child = store.session_by_name("retry")
    assert (child.parent_id, child.fork_n) == (sid, 5)
    old = store.state_at(sid, 5).todos
    new = store.state_at(child.id).todos
    keep = ("num", "content", "status", "priority", "position", "depends_on",
            "blocked_reason", "origin")
    assert {n: [getattr(t, k) for k in keep] for n, t in new.items()} == \
        {n: [getattr(t, k) for k in keep] for n, t in old.items()}
    assert cli(["list"]).out.startswith("session retry:")  # now current
    first = store.events(child.id)[0]
    assert first.payload == {"name": "retry", "parent_id": sid, "fork_n": 5}
    again = cli(["-s", "s", "replay", "--fork", "retry", "--at", "2"])
    assert again.code == 1 and "already exists" in again.err
    assert replay.fork(store, sid, "at-zero", 0) > 0


def test_the_example_campaign_replays(cli, store: Store) -> None:
    r = cli(["import", str(EXAMPLE)])
    assert r.code == 0, r.err
    sid = store.session_by_name("kimi-k25-campaign").id
    final = {t.content: t for t in store.todos(sid)}
    done = [c for c, t in final.items() if t.status == "completed"]
    assert any(c.startswith("SCP fixed script") for c in done)
    assert any(c.startswith("Run vocab mapping") for c in done)
    assert any(c.startswith("Verify checkpoint format") for c in done)
    bench = next(t for c, t in final.items() if c.startswith("Benchmark"))
    assert bench.status == "blocked" and "15%" in bench.blocked_reason \
        and "0.66x" in bench.blocked_reason
    assert any("SGLang" in c and c.startswith("Pivot") for c in final)
    steps = list(replay.steps(store, sid))
    vllm = next(t.num for c, t in final.items() if c.startswith("Start vLLM"))
    states = [next((t.status for t in s.todos if t.num == vllm), None) for s in steps]
    blocked_at = states.index("blocked")
    assert "completed" in states[blocked_at:]  # unblocked after the patch
    reason = store.state_at(sid, steps[blocked_at].n).todos[vllm].blocked_reason
    assert "kimi_k2" in reason and "llama" in reason
    actors = {s.event.actor for s in steps}
    assert actors == {"human", "agent:opencode", "runner"}
    days = {s.event.ts[:10] for s in steps}
    assert len(days) >= 3
    checks = [v for v in store.verifications(sid) if v.kind == "checkpoint"]
    assert checks and checks[0].passed and "structure only" in checks[0].verdict


def test_the_example_is_what_the_script_writes(tmp_path: Path) -> None:
    out = tmp_path / "campaign.jsonl"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_kimi_campaign.py"),
                        "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == EXAMPLE.read_bytes()
