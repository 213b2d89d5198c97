"""Leased claims under a race of real processes, on SQLite and PostgreSQL: agents with
short leases, two of them killed with SIGKILL while they hold a claim, one that stops
heartbeating and comes back late, a sweeper all the while. Judged from the event log
(tests/agents/lease_race.py): no todo held by two live leases, no live lease ended, every
dead agent's claim back exactly once, no late heartbeat taking a todo back."""

from __future__ import annotations

from pathlib import Path

from tests.agents.lease_race import RaceSpec, run_race


def test_agents_killed_and_late_never_lose_live_work(db_url: str, backend: str,
                                                    tmp_path: Path) -> None:
    spec = RaceSpec(agents=7, kills=2, silent=1, todos=18, lease=0.8)
    report = run_race(db_url, spec, tmp_path, backend)
    assert report.problems == []
    assert report.double_holds == 0 and report.live_sweeps == 0
    assert report.dead_not_back_once == 0 and report.late_retakes == 0
    assert report.completed == spec.todos
    # Each killed agent held a claim when it died, and it came back through an expiry;
    # the silent agent's late heartbeat was refused.
    assert report.expired_of_killed >= spec.kills
    assert report.refused_heartbeats == spec.silent
    assert report.leases_expired >= spec.kills + spec.silent
