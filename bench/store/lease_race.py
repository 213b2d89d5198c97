"""Leased claims under a race of real processes, bigger than the test: many agents with
short leases, some killed with SIGKILL while they hold a claim, some silent for longer than
their lease and then heartbeating late, a sweeper all the while; judged from the event
log (tests/agents/lease_race.py, the same driver and judge as
tests/agents/test_lease_race.py).

    .venv/bin/python -m bench.store.lease_race                    # SQLite and PostgreSQL
    .venv/bin/python -m bench.store.lease_race --agents 32 --kills 8 --todos 200 --sqlite-only

Prints one table, a row per backend: agents, kills, silent agents, claims, leases that
ran out (of killed agents), refused late heartbeats, heartbeats, sweeps, and what must be
0: double holds, live sweeps, dead claims not back exactly once, late re-takes. Exits 1
if any of those is not 0.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tests import pg
from tests.agents.lease_race import RaceReport, RaceSpec, run_race

COLUMNS = (("backend", "backend"), ("agents", "agents"), ("kills", "kills"),
           ("silent", "silent"), ("todos", "todos"), ("lease s", "lease_s"),
           ("claims", "claims"), ("expired", "leases_expired"),
           ("of killed", "expired_of_killed"), ("refused", "refused_heartbeats"),
           ("heartbeats", "heartbeats"), ("sweeps", "sweeps"),
           ("double holds", "double_holds"), ("live sweeps", "live_sweeps"),
           ("dead not back once", "dead_not_back_once"), ("late re-takes", "late_retakes"),
           ("seconds", "seconds"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=24)
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--silent", type=int, default=3)
    ap.add_argument("--todos", type=int, default=120)
    ap.add_argument("--lease", type=float, default=1.0, help="seconds (default 1)")
    ap.add_argument("--sqlite-only", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.kills + a.silent >= a.agents:
        raise SystemExit("--kills and --silent must leave some agents to finish the work")
    spec = RaceSpec(agents=a.agents, kills=a.kills, silent=a.silent, todos=a.todos,
                    lease=a.lease, timeout=600)
    reports: list[RaceReport] = []
    with tempfile.TemporaryDirectory(prefix="lease-race-") as tmp:
        work = Path(tmp) / "sqlite"
        work.mkdir()
        reports.append(run_race(str(work / "state.db"), spec, work, "sqlite"))
        if not a.sqlite_only:
            cluster = pg.start({"max_connections": str(max(100, a.agents * 3))})
            try:
                work = Path(tmp) / "postgres"
                work.mkdir()
                reports.append(run_race(cluster.create_database(), spec, work, "postgres"))
            finally:
                cluster.stop()
    if a.json:
        print(json.dumps([r.to_json() for r in reports], indent=2))
    else:
        rows = [[str(getattr(r, key)) for _, key in COLUMNS] for r in reports]
        widths = [max(len(head), *(len(row[i]) for row in rows))
                  for i, (head, _) in enumerate(COLUMNS)]
        print("  ".join(head.rjust(w) for (head, _), w in zip(COLUMNS, widths, strict=True)))
        for row in rows:
            print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
        for r in reports:
            for problem in r.problems:
                print(f"{r.backend}: {problem}")
    if any(r.problems for r in reports):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
