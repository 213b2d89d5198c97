"""Leased claims (issue 35) on the real store, SQLite and PostgreSQL: the claim and the end
of a lease are events, heartbeats move only the lease, a lease that ran out goes back to
pending in the transaction that notices it, a late heartbeat is refused, hooks and MCP
calls renew for free, and the history says why."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from harness import todos as uc
from harness.agents.claims import next_ready
from harness.agents.leases import heartbeat, renew
from harness.agents.notice import take
from state.fold import LEASE_EXPIRED
from state.leases import LEASE_ACTOR
from state.maintain.rebuild import rebuild
from state.store import Store
from tests.agents.lease_race import RaceReport, judge
from tests.agents.mcp_client import data, mcp_session
from tests.conftest import harness_subprocess


def seed(store: Store, *contents: tuple[str, str]) -> int:
    sid = store.create_session("default", actor="human")
    with store.write(sid, "human") as tx:
        for text, priority in contents:
            tx.create_todo(text, priority=priority)
    return sid


def wait_lapsed(store: Store, sid: int, num: int, timeout: float = 60) -> None:
    """Until todo ``num``'s lease has run out by the store's clock (reading only)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        now, leases = store.leases(sid)
        if num not in leases or leases[num].left(now) <= 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"t{num}'s lease did not run out in {timeout} s")


def age(store: Store, seconds: float) -> None:
    """Move every lease's last renewal ``seconds`` into the past (its expiry stays)."""
    with store._locked() as cur:
        cur.execute(store._sql("UPDATE leases SET heartbeat_at = heartbeat_at - ?"),
                    (seconds,))


def claim_events(store: Store, sid: int) -> list:
    return [e for e in store.events(sid, kinds=["todo.updated"])
            if "claimed_by" in e.payload["changes"]]


def test_a_claim_and_its_end_are_events_and_the_lease_is_live_data(store: Store) -> None:
    sid = seed(store, ("train", "high"), ("verify", "medium"))
    found = next_ready(store, sid, claim=True, actor="w1", lease=600)
    assert found.todo is not None and found.todo.num == 1
    assert (found.todo.claimed_by, found.todo.lease_s) == ("agent:w1", 600)
    (ev,) = claim_events(store, sid)
    assert ev.actor == "agent:w1" and ev.payload["changes"] == {
        "status": ["pending", "in_progress"], "claimed_by": [None, "agent:w1"],
        "lease_s": [None, 600]}
    now, leases = store.leases(sid)
    lease = leases[1]
    assert lease.holder == "agent:w1" and lease.expires_at == lease.heartbeat_at + 600
    assert 590 < lease.left(now) <= 600
    # A renewal moves the lease and writes no event.
    n = store.last_n(sid)
    time.sleep(0.01)
    assert store.renew_leases(sid, "agent:w1") == 1
    assert store.renew_leases(sid, "agent:w2") == 0
    renewed = store.leases(sid)[1][1].heartbeat_at
    assert renewed > lease.heartbeat_at
    assert store.last_n(sid) == n
    # A write as the holder renews too, once a tenth of the lease has passed since the
    # last renewal (before that it leaves the lease be), unless the write is not the
    # agent's doing (an import of one of its old transcripts).
    with store.write(sid, "agent:w1") as tx:
        tx.create_todo("soon after")
    assert store.leases(sid)[1][1].heartbeat_at == renewed
    age(store, 61)
    aged = store.leases(sid)[1][1].heartbeat_at
    with store.write(sid, "agent:w1", heartbeat=False) as tx:
        tx.update_todo(3, content="imported")
    assert store.leases(sid)[1][1].heartbeat_at == aged
    time.sleep(0.01)  # (the SQLite store's clock counts milliseconds)
    with store.write(sid, "agent:w1") as tx:
        tx.update_todo(3, priority="low")
    assert store.leases(sid)[1][1].heartbeat_at > renewed
    # The projection is the fold of the events, claim fields and all.
    assert rebuild(store, check=True).differences == []
    # Done ends the claim, said in the same event; the lease row goes with it.
    uc.set_status(store, sid, "t1", "completed", actor="agent:w1")
    last = store.events(sid)[-1]
    assert last.payload["changes"] == {"status": ["in_progress", "completed"],
                                       "claimed_by": ["agent:w1", None],
                                       "lease_s": [600, None]}
    t1 = store.todo(sid, 1)
    assert (t1.claimed_by, t1.claimed_at, t1.lease_s) == (None, None, None)
    assert store.leases(sid)[1] == {}
    assert rebuild(store, check=True).differences == []
    # Without a lease (and no session default) a claim never expires: no row at all.
    found = next_ready(store, sid, claim=True, actor="w2")
    assert found.todo is not None and found.todo.claimed_by == "agent:w2"
    assert found.todo.lease_s is None and store.leases(sid)[1] == {}


def test_scenario_the_silent_agents_todo_goes_to_the_next_claimer(cli, store: Store) -> None:
    """Two agents claim with 2 s leases; only b heartbeats; c, claiming after a's lease ran
    out, gets a's todo and never b's (b's is the higher priority); the history says why,
    and a's late heartbeat is refused."""
    sid = seed(store, ("b's: high", "high"), ("a's: medium", "medium"))
    r = cli(["next", "--claim", "--lease", "2s", "--actor", "b"])
    assert r.code == 0 and r.out.startswith("claimed t1 (high) b's: high (lease 2s, until ")
    assert cli(["next", "--claim", "--lease", "2s", "--actor", "a", "--json"]).code == 0
    take(store, sid, "agent:a")  # a's hook answers had told it everything up to its claim
    end = time.monotonic() + 60
    while True:  # b heartbeats; a says nothing
        now, leases = store.leases(sid)  # (reading ends nothing; any write would)
        if 2 not in leases or leases[2].left(now) <= 0:
            break  # (b's heartbeat may be the write that ends a's lease: it is one)
        r = cli(["heartbeat", "--actor", "b"])
        assert r.code == 0 and r.out.startswith("renewed t1 until "), (r.out, r.err)
        assert time.monotonic() < end
        time.sleep(0.3)
    r = cli(["next", "--claim", "--actor", "c", "--json"])
    assert r.code == 0 and json.loads(r.out)["todo"]["id"] == "t2", r.out
    # The history says why: a's lease ran out (ended by c's claim, or by a write before
    # it), then c claimed t2.
    expiry, claim = [e for e in store.events(sid, todo_id=2)][-2:]
    assert (expiry.actor, claim.actor) == (LEASE_ACTOR, "agent:c")
    why = expiry.payload[LEASE_EXPIRED]
    assert why["holder"] == "agent:a" and why["noticed_by"] in ("agent:c", "agent:b")
    assert why["lease_s"] == 2 and why["last_heartbeat_at"] < why["expired_at"] <= \
        why["noticed_at"]
    assert store.todo(sid, 1).claimed_by == "agent:b"
    assert cli(["heartbeat", "--actor", "b"]).code == 0  # b's lease lives on
    r = cli(["next", "--claim", "--actor", "d"])
    assert r.code == 1 and r.out.startswith("nothing is ready (2 in progress")
    history = cli(["show", "t2"]).out
    assert "harness lease of agent:a ran out at " in history
    assert "(last heartbeat " in history and "claimed by agent:c" in history
    assert "claimed by agent:c at " in history  # the claim line above the history
    # a comes back: its heartbeat takes nothing back, and says so once.
    r = cli(["heartbeat", "--actor", "a"])
    assert r.code == 1 and r.out.strip() == "agent:a holds no lease in session default"
    assert r.err.startswith("refused: t2: lease of agent:a ran out at ")
    r = cli(["heartbeat", "--actor", "a"])
    assert r.code == 1 and "refused" not in r.err
    assert store.todo(sid, 2).claimed_by == "agent:c"
    # ... and the notice that rides on its next hook or MCP answer tells it too.
    notice = take(store, sid, "agent:a")
    # named by its title and id, as notices name every item (harness.agents.notice)
    assert notice is not None and len(notice.lines) == 1
    assert "(t2)" in notice.lines[0], notice.lines
    assert "lease of agent:a ran out at " in notice.lines[0], notice.lines
    listed = {t["id"]: t for t in json.loads(cli(["list", "--json"]).out)}
    assert listed["t1"]["claimed_by"] == "agent:b" and listed["t1"]["lease_s"] == 2
    assert listed["t1"]["lease_expires_at"] > listed["t1"]["last_heartbeat_at"]
    assert listed["t2"]["claimed_by"] == "agent:c" and listed["t2"]["lease_expires_at"] is None


def test_reads_and_writes_end_what_ran_out_and_renew_what_they_hold(store: Store) -> None:
    sid = seed(store, ("one", "high"), ("two", "medium"), ("three", "low"))
    next_ready(store, sid, claim=True, actor="w1", lease=0.2)
    next_ready(store, sid, claim=True, actor="w2", lease=600)
    wait_lapsed(store, sid, 1)
    age(store, 61)  # w2's lease was renewed more than a tenth of 600 s ago
    before = store.leases(sid)[1][2].heartbeat_at
    # w2's own write: it ends w1's lapsed lease (by harness, noticed by w2) and renews its.
    uc.set_priority(store, sid, "t3", "high", actor="agent:w2")
    ended = [e for e in store.events(sid) if LEASE_EXPIRED in e.payload]
    assert [(e.todo_id, e.payload[LEASE_EXPIRED]["noticed_by"]) for e in ended] == \
        [(1, "agent:w2")]
    assert store.leases(sid)[1][2].heartbeat_at > before
    # Nothing lapsed and nothing held: no write at all.
    n = store.last_n(sid)
    renew(store, sid, "agent:w9")
    assert store.last_n(sid) == n
    assert store.expire_lapsed(sid) == []


def test_a_session_default_and_bad_input(cli, store: Store) -> None:
    sid = seed(store, ("one", "high"), ("two", "medium"), ("three", "low"))
    r = cli(["session", "set", "claim-lease", "30m"])
    assert r.code == 0 and r.out.strip() == "session default: claims last 30m without a " \
                                            "sign of life"
    assert "claim-lease 30m" in cli(["session", "list"]).out
    assert json.loads(cli(["session", "list", "--json"]).out)[0]["claim_lease_s"] == 1800
    assert cli(["next", "--claim", "--actor", "w1"]).code == 0
    assert store.todo(sid, 1).lease_s == 1800
    assert cli(["next", "--claim", "--actor", "w2", "--lease", "none"]).code == 0
    assert store.todo(sid, 2).lease_s is None
    assert cli(["next", "--claim", "--actor", "w3", "--lease", "90s"]).code == 0
    assert store.todo(sid, 3).lease_s == 90
    n = store.last_n(sid)
    for args, code, text in (
            (["session", "set", "lease", "5m"], 2,
             "error: harness session set: unknown session setting 'lease' (known: claim-lease)"),
            (["session", "set", "claim-lease", "soon"], 1,
             "error: session set claim-lease: bad duration 'soon': use seconds or a duration "
             "such as 90s, 15m, 12h, 1h30m (or `none` for a claim that never expires)"),
            (["next", "--lease", "5m"], 2,
             "error: --lease: only with --claim (a lease is how long a claim lasts)"),
            (["next", "--claim", "--lease", "-5"], 1, "error: --lease: bad duration '-5'")):
        r = cli(args)
        assert r.code == code and r.err.strip().startswith(text), (args, r.code, r.err)
        assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert store.last_n(sid) == n
    r = cli(["session", "set", "claim-lease", "none"])
    assert r.code == 0 and "no lease" in r.out


def test_hooks_and_mcp_calls_are_heartbeats(db_path: Path) -> None:
    prompt = json.dumps({"session_id": "s1", "transcript_path": "/x.jsonl", "cwd": "/x",
                         "hook_event_name": "UserPromptSubmit", "prompt": "go on"}).encode()

    def hook(agent: str) -> None:
        r = harness_subprocess(["hook", agent], stdin=prompt,
                               env={"HARNESS_DB": str(db_path), "HARNESS_SESSION": "default"})
        assert r.returncode == 0 and b"logged to" not in r.stderr, r.stderr

    with Store.open(str(db_path)) as store:
        sid = seed(store, ("one", "high"), ("two", "medium"))
        next_ready(store, sid, claim=True, actor="claude-code", lease=600)
        take(store, sid, "agent:claude-code")  # its notice told: its hooks have no news
        take(store, sid, "agent:codex")
        watch = store.watch()
        watch.changed()
        # Renewed less than a tenth of its lease ago (claimed just now): a hook call
        # reads, and writes nothing; nor does one by an agent that holds nothing.
        hook("claude-code")
        hook("codex")
        assert not watch.changed()
        # A tenth of its lease since the last renewal: the next hook call renews it.
        with store._locked() as cur:
            cur.execute("UPDATE leases SET heartbeat_at = heartbeat_at - 100")
        watch.changed()
        stale = store.leases(sid)[1][1]
        n = store.last_n(sid)
        hook("claude-code")
        assert watch.changed()
        _now, leases = store.leases(sid)
        assert leases[1].heartbeat_at > stale.heartbeat_at + 99
        assert leases[1].expires_at == leases[1].heartbeat_at + 600
        assert store.last_n(sid) == n  # a renewal is no event
        hook("claude-code")
        assert not watch.changed()
        watch.close()

    async def go() -> tuple[dict, dict, dict]:
        async with mcp_session(db_path, client="worker-a") as a:
            claimed = data(await a.call_tool("claim_next", {"lease": "1s"}))
            with Store.open(str(db_path)) as s:
                wait_lapsed(s, sid, 2)
            late = data(await a.call_tool("pipeline_status", {}))
            listed = data(await a.call_tool("todoread", {"format": "json"}))
        return claimed, late, listed

    claimed, late, listed = anyio.run(go)
    assert claimed["todo"]["id"] == "t2" and claimed["todo"]["lease_s"] == 1
    # The call after the lease ran out ends it, takes nothing back, and its answer's notice
    # says so.
    assert "lease of agent:worker-a ran out at" in late["notice"]
    t2 = next(t for t in listed["todos"] if t["id"] == "t2")
    assert t2["status"] == "pending" and t2["claimed_by"] is None


def test_the_next_claim_ends_a_lease_that_ran_out_and_takes_its_todo(store: Store) -> None:
    sid = seed(store, ("one", "high"), ("two", "low"))
    next_ready(store, sid, claim=True, actor="w1", lease=0.1)
    wait_lapsed(store, sid, 1)
    found = next_ready(store, sid, claim=True, actor="w2", lease=60)
    assert found.todo is not None and found.todo.num == 1
    expiry, claim = store.events(sid)[-2:]  # one transaction: the end, then the claim
    assert (expiry.actor, claim.actor) == (LEASE_ACTOR, "agent:w2")
    assert expiry.payload[LEASE_EXPIRED]["noticed_by"] == "agent:w2"
    assert claim.payload["changes"]["claimed_by"] == [None, "agent:w2"]


def test_a_late_heartbeat_in_the_api(store: Store) -> None:
    sid = seed(store, ("one", "high"))
    next_ready(store, sid, claim=True, actor="w1", lease=0.1)
    wait_lapsed(store, sid, 1)
    beat = heartbeat(store, sid, "default", "agent:w1")
    assert beat.held == [] and [e.todo_id for e in beat.lost] == [1]
    assert beat.to_json()["lost"][0]["holder"] == "agent:w1"
    assert store.todo(sid, 1).status == "pending"
    assert heartbeat(store, sid, "default", "agent:w1").lost == []  # told once


def test_migrating_a_store_from_before_leases(db_url: str, backend: str) -> None:
    with Store.open(db_url) as store:
        sid = seed(store, ("kept", "high"))
        with store.locked() as conn:
            from sqlalchemy import text

            conn.execute(text("DROP TABLE leases"))
            for col in ("claimed_by", "claimed_at", "lease_s"):
                conn.execute(text(f"ALTER TABLE todos DROP COLUMN {col}"))
            conn.execute(text("DELETE FROM migrations WHERE name = '005_claim_leases'"))
    with Store.open(db_url) as store:
        assert store.pending_migrations() == []
        assert store.todo(sid, 1).claimed_by is None
        next_ready(store, sid, claim=True, actor="w1", lease=60)
        assert store.leases(sid)[1][1].holder == "agent:w1"


@pytest.mark.sqlite
def test_the_race_judge_sees_double_holds_and_live_sweeps(db_path: Path) -> None:
    """The judge of tests/agents/lease_race.py fails a log that breaks the rules."""
    url = str(db_path)
    with Store.open(url) as store:
        sid = store.create_session("race", actor="human")
        with store.write(sid, "human") as tx:
            tx.create_todo("task")
        with store.write(sid, "agent:w1") as tx:
            tx.update_todo(1, status="in_progress", claimed_by="agent:w1", lease_s=1.0)
        with store.write(sid, "agent:w2") as tx:  # a claim over a live one
            tx.emit("todo.updated", todo_id=1, payload={"changes": {
                "claimed_by": ["agent:w1", "agent:w2"]}})
            tx.emit("todo.updated", todo_id=1, payload={"changes": {
                "status": ["in_progress", "pending"], "claimed_by": ["agent:w2", None]},
                LEASE_EXPIRED: {"holder": "agent:w2", "lease_s": 1.0,
                                "last_heartbeat_at": "2026-01-01T00:00:00.000000Z",
                                "expired_at": "2026-01-01T00:00:01.000000Z",
                                "noticed_at": "2026-01-01T00:00:02.000000Z"}})
    report = RaceReport(backend="sqlite", agents=2, kills=0, silent=0, todos=1, lease_s=1.0)
    renewed_later = 1767225601.5  # 2026-01-01T00:00:01.5Z: after the named heartbeat
    logs = {"agent:w2": [{"ev": "claim", "num": 1, "at": renewed_later - 1.2},
                         {"ev": "beat", "at": [[1, renewed_later]], "lost": []}]}
    judge(url, logs, set(), report)
    assert report.double_holds == 1 and report.live_sweeps == 1
    assert report.completed == 0 and len(report.problems) == 3


def test_rebuild_keeps_one_lease_per_leased_claim(cli, store: Store) -> None:
    sid = seed(store, ("one", "high"), ("two", "medium"))
    next_ready(store, sid, claim=True, actor="w1", lease=600)
    with store._locked() as cur:
        cur.execute(store._q["delete_lease"], (sid, 1))
        cur.execute(store._q["upsert_lease"], (sid, 2, "agent:ghost", 5.0, 0.0, 5.0))
    bad = cli(["rebuild", "--check"])
    assert bad.code == 1
    assert "session default: lease of t1: missing for agent:w1's claim" in bad.out
    assert "session default: lease of t2: stored, but the events give t2 no leased claim" \
        in bad.out
    assert cli(["rebuild"]).code == 0
    _now, leases = store.leases(sid)
    assert list(leases) == [1] and leases[1].holder == "agent:w1"
    assert cli(["rebuild", "--check"]).code == 0
