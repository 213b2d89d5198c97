"""A race of real agent processes over leased claims, and its judge (issue 35).

Each agent is a process of its own (``python -m tests.agents.lease_race agent ...``) that
loops: claim the next todo with a short lease (``harness.agents.claims.next_ready``),
work on it while heartbeating (``harness.agents.leases.heartbeat``), then complete it in a
write transaction that checks it still holds it. Some agents are killed with SIGKILL
while they hold a claim; "silent" ones stop heartbeating for longer than their lease
once, then heartbeat late (and must be refused). A sweeper process ends lapsed leases
all the while (``harness.agents.leases.sweep``). Every agent writes what it did, with
the store's clock, as JSON lines on stdout.

:func:`judge` then reads the event log (and the agents' own lines) and counts what must
never happen:

* double holds: a claim of a todo that a live (not ended) claim still holds;
* live sweeps: a lease ended although it had been renewed after the heartbeat that its
  expiry names, or before it had run out by the store's clock;
* dead claims that did not come back exactly once: each claim a killed agent left open
  must be ended by exactly one expiry;
* late heartbeats that took a todo back.

``tests/agents/test_lease_race.py`` runs it small on SQLite and PostgreSQL;
``bench/store/lease_race.py`` runs it bigger and prints the figures (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SESSION = "race"
EPS = 1e-4  # timestamps go through ISO text with microseconds in the events


@dataclass
class RaceSpec:
    agents: int = 8
    kills: int = 2
    silent: int = 1
    todos: int = 24
    lease: float = 0.8
    work: tuple[float, float] = (0.15, 0.45)
    timeout: float = 150.0
    seed: int = 35


@dataclass
class RaceReport:
    backend: str
    agents: int
    kills: int
    silent: int
    todos: int
    lease_s: float
    claims: int = 0
    leases_expired: int = 0
    expired_of_killed: int = 0
    refused_heartbeats: int = 0
    heartbeats: int = 0
    sweeps: int = 0
    double_holds: int = 0
    live_sweeps: int = 0
    dead_not_back_once: int = 0
    late_retakes: int = 0
    completed: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- the processes -----------------------------------------------------------------------------

def _say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _wait_for(go: Path) -> None:
    sys.stderr.write("ready\n")
    sys.stderr.flush()
    while not go.exists():
        time.sleep(0.005)


def agent(url: str, name: str, role: str, lease: float, work_lo: float, work_hi: float,
          go: Path, seed: int) -> None:
    from harness.agents.claims import next_ready
    from harness.agents.leases import heartbeat
    from state.store import Store

    rng = random.Random(seed)
    actor = f"agent:{name}"
    store = Store.open(url)
    sid = store.session_by_name(SESSION).id  # type: ignore[union-attr]
    _wait_for(go)
    silent_once = role == "silent"
    while True:
        found = next_ready(store, sid, claim=True, actor=name, lease=lease)
        if found.todo is None:
            if found.in_progress == 0 and found.waiting == 0:
                return  # nothing pending, nothing held: all done
            time.sleep(0.02)
            continue
        num = found.todo.num
        assert found.lease_expires_at is not None
        _say(ev="claim", num=num, at=found.lease_expires_at - lease)
        if silent_once:
            silent_once = False
            time.sleep(lease * 2.5)  # no sign of life for longer than the lease
            beat = heartbeat(store, sid, SESSION, actor)
            _say(ev="late", num=num, held=[x.num for x in beat.held],
                 lost=[e.todo_id for e in beat.lost])
            continue
        # A victim stays busy (heartbeating) with its claim until it is killed, maybe in a
        # heartbeat's own transaction: it dies holding it.
        until = time.monotonic() + (float("inf") if role == "kill"
                                    else rng.uniform(work_lo, work_hi))
        lost = False
        while time.monotonic() < until:
            time.sleep(lease / 5)
            beat = heartbeat(store, sid, SESSION, actor)
            mine = {x.num: x for x in beat.held}
            _say(ev="beat", at=[[x.num, x.heartbeat_at] for x in beat.held],
                 lost=[e.todo_id for e in beat.lost])
            if num not in mine:
                lost = True
                break
        if lost:
            continue
        with store.write(sid, actor) as tx:
            t = tx.state.todos.get(num)
            if t is not None and t.claimed_by == actor and t.status == "in_progress":
                tx.update_todo(num, status="completed")
                _say(ev="done", num=num)
            else:
                _say(ev="gone", num=num)


def sweeper(url: str, go: Path, stop: Path) -> None:
    from harness.agents.leases import sweep
    from state.store import Store

    store = Store.open(url)
    _wait_for(go)
    while not stop.exists():
        ended = sweep(store, None)
        _say(ev="sweep", ended=[[e.session_id, e.todo_id] for e in ended])
        time.sleep(0.05)


# -- the driver --------------------------------------------------------------------------------

def seed_store(url: str, todos: int) -> None:
    from state.store import Store

    with Store.open(url) as store:
        sid = store.create_session(SESSION, actor="human")
        with store.write(sid, "human") as tx:
            for i in range(todos):
                tx.create_todo(f"task {i}", priority=("high", "medium", "low")[i % 3])


def _spawn(args: list[str], url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": url,
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "tests.agents.lease_race", *args], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


class _Reader(threading.Thread):
    """Collects one process's JSON lines as they come (a full pipe would stall it)."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        super().__init__(daemon=True)
        self.proc = proc
        self.lines: list[dict[str, Any]] = []
        self.claimed = threading.Event()

    def run(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            self.lines.append(line)
            if line.get("ev") == "claim":
                self.claimed.set()


def run_race(url: str, spec: RaceSpec, workdir: Path, backend: str) -> RaceReport:
    """Seed the store, run the agents and the sweeper, kill the victims, judge the log."""
    seed_store(url, spec.todos)
    rng = random.Random(spec.seed)
    go, stop = workdir / "go", workdir / "stop"
    roles = (["kill"] * spec.kills + ["silent"] * spec.silent
             + ["beat"] * (spec.agents - spec.kills - spec.silent))
    procs = [_spawn(["agent", url, f"w{i}", role, str(spec.lease), str(spec.work[0]),
                     str(spec.work[1]), str(go), str(spec.seed + i)], url)
             for i, role in enumerate(roles)]
    sweep_proc = _spawn(["sweeper", url, str(go), str(stop)], url)
    everyone = [*procs, sweep_proc]
    readers = [_Reader(p) for p in everyone]
    killed: dict[str, float] = {}
    try:
        for p in everyone:
            assert p.stderr is not None
            line = p.stderr.readline()
            if line != b"ready\n":
                raise RuntimeError(f"a race process did not start: {line!r} "
                                   f"{p.stderr.read().decode(errors='replace')[-2000:]}")
        for r in readers:
            r.start()
        t0 = time.monotonic()
        go.touch()
        for i, role in enumerate(roles):
            if role != "kill":
                continue
            readers[i].claimed.wait(timeout=spec.timeout)
            time.sleep(rng.uniform(0.0, spec.lease))  # mid-work, maybe mid-transaction
            procs[i].send_signal(signal.SIGKILL)
            procs[i].wait()
            killed[f"agent:w{i}"] = time.time()
        for i, p in enumerate(procs):
            if roles[i] == "kill":
                continue
            left = spec.timeout - (time.monotonic() - t0)
            try:
                p.wait(timeout=max(left, 1))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"agent w{i} did not finish in {spec.timeout:.0f} s") from None
            if p.returncode != 0:
                assert p.stderr is not None
                raise RuntimeError(f"agent w{i} failed: "
                                   f"{p.stderr.read().decode(errors='replace')[-2000:]}")
        seconds = time.monotonic() - t0
        stop.touch()
        sweep_proc.wait(timeout=60)
    finally:
        for p in everyone:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r in readers:
        r.join(timeout=10)
    logs = {f"agent:w{i}": readers[i].lines for i in range(len(procs))}
    report = RaceReport(backend=backend, agents=spec.agents, kills=spec.kills,
                        silent=spec.silent, todos=spec.todos, lease_s=spec.lease,
                        seconds=round(seconds, 1))
    report.sweeps = sum(1 for x in readers[-1].lines if x.get("ev") == "sweep")
    judge(url, logs, set(killed), report)
    return report


# -- the judge ---------------------------------------------------------------------------------

def judge(url: str, logs: dict[str, list[dict[str, Any]]], killed: set[str],
          report: RaceReport) -> None:
    """Count, from the event log and the agents' lines, what must never happen."""
    from state.fold import LEASE_EXPIRED
    from state.store import Store
    from state.values import normalize_ts

    def epoch(text: str) -> float:
        from datetime import datetime

        return datetime.fromisoformat(normalize_ts(text).replace("Z", "+00:00")).timestamp()

    with Store.open(url) as store:
        sid = store.session_by_name(SESSION).id  # type: ignore[union-attr]
        events = store.events(sid, kinds=["todo.updated"])
        todos = store.todos(sid)
    report.completed = sum(t.status == "completed" for t in todos)
    if report.completed != report.todos:
        report.problems.append(f"{report.todos - report.completed} todo(s) not completed")
    # Each agent's renewals of each todo (the store's clock), from its own lines.
    renewals: dict[tuple[str, int], list[float]] = {}
    claims_at: dict[tuple[str, int], list[float]] = {}
    for actor, lines in logs.items():
        for line in lines:
            if line["ev"] == "beat":
                report.heartbeats += 1
                for num, at in line["at"]:
                    renewals.setdefault((actor, num), []).append(at)
            elif line["ev"] == "claim":
                claims_at.setdefault((actor, line["num"]), []).append(line["at"])
            elif line["ev"] == "late":
                if line["num"] in line["held"]:
                    report.late_retakes += 1
                    report.problems.append(f"{actor}'s late heartbeat kept t{line['num']}")
                if line["num"] in line["lost"]:
                    report.refused_heartbeats += 1
    holder: dict[int, str | None] = {}
    open_claims: dict[int, tuple[str, int]] = {}  # todo -> (holder, claim event n)
    ends: dict[tuple[str, int, int], list[str]] = {}  # (holder, todo, claim n) -> how it ended
    for ev in events:
        num = int(ev.todo_id)  # type: ignore[arg-type]
        ch = ev.payload.get("changes", {})
        if "claimed_by" not in ch:
            continue
        old, new = ch["claimed_by"]
        if new is not None:
            report.claims += 1
            if holder.get(num) is not None:
                report.double_holds += 1
                report.problems.append(f"event {ev.n}: {new} claimed t{num} held by "
                                       f"{holder[num]}")
            holder[num] = new
            open_claims[num] = (new, ev.n)
            continue
        if holder.get(num) != old:
            report.problems.append(f"event {ev.n}: ends a claim of t{num} by {old}, "
                                   f"but {holder.get(num)} held it")
        holder[num] = None
        claim = open_claims.pop(num, (old, 0))
        lease = ev.payload.get(LEASE_EXPIRED)
        ends.setdefault((claim[0], num, claim[1]), []).append(
            "expired" if isinstance(lease, dict) else "released")
        if not isinstance(lease, dict):
            continue
        report.leases_expired += 1
        if old in killed:
            report.expired_of_killed += 1
        hb = epoch(lease["last_heartbeat_at"])
        ran_out = epoch(lease["expired_at"])
        noticed = epoch(lease["noticed_at"])
        if ran_out > noticed + EPS or abs(hb + float(lease["lease_s"]) - ran_out) > EPS:
            report.live_sweeps += 1
            report.problems.append(f"event {ev.n}: t{num} ended at {lease['noticed_at']}, "
                                   f"before it ran out at {lease['expired_at']}")
        # The renewals of this claim: after its claim, up to when it was ended.
        started = max((a for a in claims_at.get((old, num), []) if a <= noticed + EPS),
                      default=None)
        seen = [a for a in renewals.get((old, num), [])
                if started is not None and started - EPS <= a <= noticed + EPS]
        if seen and max(seen) > hb + EPS:
            report.live_sweeps += 1
            report.problems.append(f"event {ev.n}: {old}'s lease on t{num} was renewed at "
                                   f"{max(seen):.6f}, after the heartbeat its expiry names "
                                   f"({lease['last_heartbeat_at']})")
    for num, (who, n) in open_claims.items():
        ends.setdefault((who, num, n), [])
    for (who, num, n), how in ends.items():
        if who in killed and how.count("expired") != 1 and "released" not in how:
            report.dead_not_back_once += 1
            report.problems.append(f"{who}'s claim of t{num} (event {n}) ended {how}")


def main(argv: list[str]) -> None:
    if argv[0] == "agent":
        url, name, role, lease, lo, hi, go, seed = argv[1:9]
        agent(url, name, role, float(lease), float(lo), float(hi), Path(go), int(seed))
    elif argv[0] == "sweeper":
        sweeper(argv[1], Path(argv[2]), Path(argv[3]))
    else:
        raise SystemExit(f"unknown role {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
