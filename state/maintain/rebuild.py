"""Rebuild every projection from the event log alone, or check the stored ones against it.

For each session this folds the events from the first with :func:`state.fold.apply` (the
same fold the live writes use), compares the result with the stored projection (todos,
runs, verifications, artifacts) and with every stored snapshot, and unless asked only to
check, rewrites those rows from the fold, snapshots exactly every ``SNAPSHOT_EVERY``
events. It holds the store's write lock while it works on a session, so the log cannot
move under it; readers carry on.

Agent views are not projections (they are each agent's merge base, not derived from
events) and run logs are data; both are left alone. Leases are live data too (heartbeats
move them), but one must exist exactly for each leased claim the fold holds: a missing
one is made (running from now), one without its claim removed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from state import tx as tx_mod
from state.db.connection import paramstyle_sql
from state.db.sql import (
    artifact_values,
    event_from_row,
    run_values,
    todo_values,
    verification_values,
)
from state.fold import SessionState, apply, claim_of
from state.store import Store
from state.values import dumps

_SQL = {
    "sessions": "SELECT id, name FROM sessions ORDER BY id",
    "snapshots": "SELECT n, state FROM snapshots WHERE session_id = ? ORDER BY n",
    "delete_todos": "DELETE FROM todos WHERE session_id = ?",
    "delete_verifications": "DELETE FROM verifications WHERE session_id = ?",
    "delete_artifacts": "DELETE FROM artifacts WHERE session_id = ?",
    "delete_snapshots": "DELETE FROM snapshots WHERE session_id = ?",
    "run_ids": "SELECT id FROM runs WHERE session_id = ?",
    "delete_run_logs": "DELETE FROM run_logs WHERE run_id = ?",
    "delete_run_series": "DELETE FROM run_series WHERE run_id = ?",
    "delete_run": "DELETE FROM runs WHERE id = ?",
}

Progress = Callable[[str, int, int], None]


@dataclass
class Difference:
    session: str
    what: str  # "todo t3", "run r2", "snapshot at 256", ...
    detail: str

    def __str__(self) -> str:
        return f"session {self.session}: {self.what}: {self.detail}"


@dataclass
class RebuildReport:
    sessions: int = 0
    events: int = 0
    snapshots: int = 0
    rewritten: bool = False
    differences: list[Difference] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"sessions": self.sessions, "events": self.events, "snapshots": self.snapshots,
                "rewritten": self.rewritten,
                "differences": [asdict(d) for d in self.differences]}


def rebuild(store: Store, *, session_ids: Iterable[int] | None = None, check: bool = False,
            progress: Progress | None = None, batch: int = 5000) -> RebuildReport:
    """Fold every event of each session again; report (and unless ``check``, repair) what
    the stored projection and snapshots say differently."""
    q = {k: paramstyle_sql(v, store.dialect) for k, v in _SQL.items()}
    report = RebuildReport(rewritten=not check)
    with store._reader() as cur:
        cur.execute(q["sessions"])
        sessions = cur.fetchall()
    wanted = set(session_ids) if session_ids is not None else None
    for sid, name in sessions:
        if wanted is not None and sid not in wanted:
            continue
        with store._locked() as cur:
            _one(store, cur, q, sid, name, check, report, progress, batch)
        store._todo_cache.pop(sid, None)
        report.sessions += 1
    return report


def _one(store: Store, cur: Any, q: dict[str, str], sid: int, name: str, check: bool,
         report: RebuildReport, progress: Progress | None, batch: int) -> None:
    every = tx_mod.SNAPSHOT_EVERY
    cur.execute(store._q["max_n"], (sid,))
    row = cur.fetchone()
    last = row[0] if row and row[0] is not None else 0
    cur.execute(q["snapshots"], (sid,))
    stored_snaps = dict(cur.fetchall())  # n -> state text; few rows (one per K events)
    new_snaps: list[tuple[int, int, int, str]] = []
    state = SessionState(session_id=sid)
    done = 0
    while done < last:
        hi = min(done + batch, last)
        cur.execute(store._q["events_between"], (sid, done, hi))
        for r in cur.fetchall():
            ev = event_from_row(r)
            apply(state, ev)
            snap = stored_snaps.pop(ev.n, None)
            if snap is not None or ev.n % every == 0:
                folded = state.to_json()
                if snap is not None and json.loads(snap) != folded:
                    report.differences.append(Difference(
                        name, f"snapshot at {ev.n}", "differs from the fold of events "
                        f"1..{ev.n}" + _first_difference(json.loads(snap), folded)))
                elif snap is None:
                    report.differences.append(Difference(
                        name, f"snapshot at {ev.n}", "missing"))
                if ev.n % every == 0:
                    new_snaps.append((sid, ev.n, ev.seq, dumps(folded)))
        report.events += hi - done
        done = hi
        if progress is not None:
            progress(name, done, last)
    for n in sorted(stored_snaps):
        report.differences.append(Difference(name, f"snapshot at {n}",
                                             "stored beyond the last event"))
    stored = store.projection_state(sid)
    _compare(name, "todo t", state.todos, stored.todos, report)
    _compare(name, "run r", state.runs, stored.runs, report)
    _compare(name, "verification v", state.verifications, stored.verifications, report)
    _compare(name, "artifact a", state.artifacts, stored.artifacts, report)
    _check_leases(store, cur, sid, name, state, check, report)
    report.snapshots += len(new_snaps)
    if check:
        return
    _rewrite(store, cur, q, sid, state, new_snaps)


def _compare(session: str, label: str, folded: Mapping[int, Any], stored: Mapping[int, Any],
             report: RebuildReport) -> None:
    for key in sorted(set(folded) | set(stored)):
        a, b = folded.get(key), stored.get(key)
        if a == b:
            continue
        what = f"{label}{key}"
        if b is None:
            report.differences.append(Difference(session, what, "missing from the projection"))
        elif a is None:
            report.differences.append(Difference(session, what,
                                                 "in the projection but not in the events"))
        else:
            fa, fb = asdict(a), asdict(b)
            parts = [f"{k} stored {fb[k]!r}, events say {fa[k]!r}" for k in fa if fa[k] != fb[k]]
            report.differences.append(Difference(session, what, "; ".join(parts)))


def _check_leases(store: Store, cur: Any, sid: int, name: str, state: SessionState,
                  check: bool, report: RebuildReport) -> None:
    """One ``leases`` row for each leased claim of the fold, held by the claim's holder."""
    q = store._q
    cur.execute(q["session_leases"], (sid,))
    rows = cur.fetchall()
    now = float(rows[0][0])
    stored = {r[1]: r[2] for r in rows if r[1] is not None}  # todo -> holder
    claims = {t.num: claim_of(t) for t in state.todos.values() if claim_of(t) is not None}
    for num in sorted(set(stored) | set(claims)):
        claim = claims.get(num)
        if claim is not None and stored.get(num) == claim[0]:
            continue
        what = f"lease of t{num}"
        if claim is None:
            report.differences.append(Difference(
                name, what, f"stored, but the events give t{num} no leased claim"))
        else:
            report.differences.append(Difference(name, what, f"missing for {claim[0]}'s claim"
                                                 if num not in stored else
                                                 f"held by {stored[num]}, the events say "
                                                 f"{claim[0]}"))
        if check:
            continue
        if claim is None:
            cur.execute(q["delete_lease"], (sid, num))
        else:
            cur.execute(q["upsert_lease"], (sid, num, claim[0], claim[1], now, now + claim[1]))


def _first_difference(stored: dict[str, Any], folded: dict[str, Any]) -> str:
    for key in folded:
        if stored.get(key) != folded[key]:
            return f" (first in {key!r})"
    return ""


def _rewrite(store: Store, cur: Any, q: dict[str, str], sid: int, state: SessionState,
             snaps: list[tuple[int, int, int, str]]) -> None:
    sq = store._q
    cur.execute(q["delete_todos"], (sid,))
    cur.executemany(sq["insert_todo"], [[sid, *todo_values(t)] for t in state.todos.values()])
    # Runs are updated in place: run_logs and run_series point at them.
    cur.execute(q["run_ids"], (sid,))
    existing = {r[0] for r in cur.fetchall()}
    for rid, run in state.runs.items():
        if rid in existing:
            cur.execute(sq["update_run"], [*run_values(run)[1:], rid])
        else:
            cur.execute(sq["insert_run"], [sid, *run_values(run)])
    for rid in existing - set(state.runs):
        cur.execute(q["delete_run_logs"], (rid,))
        cur.execute(q["delete_run_series"], (rid,))
        cur.execute(q["delete_run"], (rid,))
    cur.execute(q["delete_verifications"], (sid,))
    cur.executemany(sq["insert_verification"],
                    [verification_values(v, sid) for v in state.verifications.values()])
    cur.execute(q["delete_artifacts"], (sid,))
    cur.executemany(sq["insert_artifact"],
                    [artifact_values(a, sid) for a in state.artifacts.values()])
    cur.execute(q["delete_snapshots"], (sid,))
    if snaps:
        cur.executemany(sq["insert_snapshot"], snaps)


__all__ = ["Difference", "RebuildReport", "rebuild"]
