"""The SQL the store runs by hand (DB-API, ``?`` placeholders), and how its rows become
the fold's states. Shared by the write transaction (:mod:`state.tx`) and the readers
(:mod:`state.read.readers`); nothing here imports SQLAlchemy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from functools import lru_cache
from typing import Any

from state.fold import ArtifactState, Event, RunState, TodoState, VerificationState
from state.values import dumps

TODO_COLS = ("num", "content", "active_form", "status", "priority", "position", "stage",
              "depends_on", "blocked_reason", "origin", "created_at", "updated_at",
              "claimed_by", "claimed_at", "lease_s")
LEASE_COLS = "num, holder, lease_s, heartbeat_at, expires_at"
# ``{CLOCK}`` is the store's clock in seconds since the epoch (state.db.dialect.clock_sql),
# put in when the store prepares its statements.
RUN_COLS = tuple(f.name for f in fields(RunState))
EVENT_COLS = "seq, session_id, n, ts, actor, kind, todo_id, payload, ref"
RUN_JSON = ("result", "job")

SQL: dict[str, str] = {
    "max_seq": "SELECT seq FROM events ORDER BY seq DESC LIMIT 1",
    "max_n": "SELECT n FROM events WHERE session_id = ? ORDER BY n DESC LIMIT 1",
    "max_todo": "SELECT todo_id FROM events WHERE session_id = ? AND todo_id IS NOT NULL "
                "ORDER BY todo_id DESC LIMIT 1",
    # One round trip for the three numbers every write needs (each an index seek), and
    # the writer's agent view, which an agent's write reads next (a primary-key lookup;
    # on PostgreSQL a round trip saved is ~10% of an agent write); then the store's clock,
    # the session's earliest lease expiry and how many of the writer's leases were last
    # renewed more than a tenth of their length ago (a few rows under the session's key),
    # for the leases (state/leases.py).
    "load_tops": "SELECT (SELECT seq FROM events ORDER BY seq DESC LIMIT 1), "
                 "(SELECT n FROM events WHERE session_id = ? ORDER BY n DESC LIMIT 1), "
                 "(SELECT todo_id FROM events WHERE session_id = ? AND todo_id IS NOT NULL "
                 "ORDER BY todo_id DESC LIMIT 1), "
                 "(SELECT view FROM agent_views WHERE session_id = ? AND actor = ?), "
                 "{CLOCK}, (SELECT MIN(expires_at) FROM leases WHERE session_id = ?), "
                 "(SELECT COUNT(*) FROM leases WHERE session_id = ? AND holder = ? "
                 "AND {CLOCK} - heartbeat_at > lease_s * 0.1)",
    # ... and of the actor's leases, how many were last renewed more than a tenth of their
    # length ago (RENEW_AFTER, state/leases.py): an agent that calls often renews each
    # lease at most ten times in its length.
    "lease_check": "SELECT c.now, (SELECT MIN(expires_at) FROM leases WHERE session_id = ?), "
                   "(SELECT COUNT(*) FROM leases WHERE session_id = ? AND holder = ? "
                   "AND c.now - heartbeat_at > lease_s * 0.1) "
                   "FROM (SELECT {CLOCK} AS now) c",
    # The clock comes back even without a lease (one row of NULLs).
    "session_leases": "SELECT c.now, l.num, l.holder, l.lease_s, l.heartbeat_at, l.expires_at "
                      "FROM (SELECT {CLOCK} AS now) c LEFT JOIN leases l ON l.session_id = ? "
                      "ORDER BY l.num",
    "lapsed_leases": f"SELECT {LEASE_COLS} FROM leases WHERE session_id = ? "
                     "AND expires_at <= ? ORDER BY num",
    "lapsed_sessions": "SELECT DISTINCT session_id FROM leases WHERE expires_at <= {CLOCK} "
                       "ORDER BY session_id",
    # The clock read once (PostgreSQL's clock_timestamp() moves during a statement), under
    # the write lock.
    "renew_leases": "UPDATE leases SET heartbeat_at = c.now, expires_at = c.now + lease_s "
                    "FROM (SELECT {CLOCK} AS now) c "
                    "WHERE session_id = ? AND holder = ? AND expires_at > c.now",
    "renew_leases_at": "UPDATE leases SET heartbeat_at = ?, expires_at = ? + lease_s "
                       "WHERE session_id = ? AND holder = ? AND expires_at > ?",
    "upsert_lease": "INSERT INTO leases (session_id, num, holder, lease_s, heartbeat_at, "
                    "expires_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, num) DO "
                    "UPDATE SET holder = excluded.holder, lease_s = excluded.lease_s, "
                    "heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at",
    "delete_lease": "DELETE FROM leases WHERE session_id = ? AND num = ?",
    "load_todos": f"SELECT {', '.join(TODO_COLS)} FROM todos WHERE session_id = ?",
    "load_runs": f"SELECT {', '.join(RUN_COLS)} FROM runs WHERE session_id = ?",
    "insert_event": "INSERT INTO events (seq, session_id, n, ts, actor, kind, todo_id, payload, ref,"
                    " op) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    # A retried write's key, if a commit of it landed (state/retry.py), and what it wrote.
    "write_landed": "SELECT session_id, n FROM events WHERE op = ?",
    "events_from": f"SELECT {EVENT_COLS}, op FROM events WHERE session_id = ? AND n >= ? "
                   "ORDER BY n",
    "insert_todo": f"INSERT INTO todos (session_id, {', '.join(TODO_COLS)}) VALUES "
                   f"(?, {', '.join('?' for _ in TODO_COLS)})",
    "update_todo": "UPDATE todos SET " + ", ".join(f"{c} = ?" for c in TODO_COLS[1:])
                   + " WHERE session_id = ? AND num = ?",
    "delete_todo": "DELETE FROM todos WHERE session_id = ? AND num = ?",
    "insert_run": f"INSERT INTO runs (session_id, {', '.join(RUN_COLS)}) VALUES "
                  f"(?, {', '.join('?' for _ in RUN_COLS)})",
    "update_run": "UPDATE runs SET " + ", ".join(f"{c} = ?" for c in RUN_COLS[1:])
                  + " WHERE id = ?",
    "insert_verification": "INSERT INTO verifications (id, session_id, todo_id, run_id, kind, "
                           "artifact, sha256, passed, verdict, checks, metrics, gate, created_at) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "insert_artifact": "INSERT INTO artifacts (id, session_id, run_id, todo_id, path, sha256, "
                       "size, kind, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "last_snapshot": "SELECT state FROM snapshots WHERE session_id = ? ORDER BY n DESC LIMIT 1",
    "snapshot_at": "SELECT state FROM snapshots WHERE session_id = ? AND n <= ? "
                   "ORDER BY n DESC LIMIT 1",
    "events_after": f"SELECT {EVENT_COLS} FROM events WHERE session_id = ? AND n > ? ORDER BY n",
    "events_between": f"SELECT {EVENT_COLS} FROM events WHERE session_id = ? AND n > ? "
                      "AND n <= ? ORDER BY n",
    "insert_snapshot": "INSERT INTO snapshots (session_id, n, seq, state) VALUES (?, ?, ?, ?)",
    "insert_source": "INSERT INTO imports (source_key, session_id, n, imported_at) "
                     "VALUES (?, ?, ?, ?) ON CONFLICT (source_key) DO UPDATE SET "
                     "session_id = excluded.session_id, n = excluded.n, "
                     "imported_at = excluded.imported_at",
    "get_source": "SELECT session_id, n FROM imports WHERE source_key = ?",
    "get_view": "SELECT view FROM agent_views WHERE session_id = ? AND actor = ?",
    "upsert_view": "INSERT INTO agent_views (session_id, actor, view, updated_at) VALUES "
                   "(?, ?, ?, ?) ON CONFLICT (session_id, actor) DO UPDATE SET "
                   "view = excluded.view, updated_at = excluded.updated_at",
    "insert_session": "INSERT INTO sessions (name, created_at, pipeline, parent_id, fork_n) "
                      "VALUES (?, ?, ?, ?, ?)",
    "session_id": "SELECT id FROM sessions WHERE name = ?",
    "session_name": "SELECT name FROM sessions WHERE id = ?",
    "max_id_runs": "SELECT id FROM runs ORDER BY id DESC LIMIT 1",
    "max_id_verifications": "SELECT id FROM verifications ORDER BY id DESC LIMIT 1",
    "max_id_artifacts": "SELECT id FROM artifacts ORDER BY id DESC LIMIT 1",
    # A second watcher re-reading the same bytes must not fail the write.
    "insert_log": "INSERT INTO run_logs (run_id, start, data) VALUES (?, ?, ?) "
                  "ON CONFLICT (run_id, start) DO NOTHING",
    "insert_point": "INSERT INTO run_series (run_id, start, metric, axis, x, y, labels, lo, hi, "
                    "ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (run_id, start) DO NOTHING",
    "update_session_pipeline": "UPDATE sessions SET pipeline = ? WHERE id = ?",
    "upsert_meta": "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                   "SET value = excluded.value",
}


MULTI_ROW_MAX = 100


@lru_cache(maxsize=MULTI_ROW_MAX)
def multi_row_insert(single: str, count: int) -> str:
    """``INSERT ... VALUES (%s, ...)`` -> the same with ``count`` rows of values."""
    head, _, values = single.partition(" VALUES ")
    return f"{head} VALUES {', '.join([values] * count)}"


def todo_from_row(row: Sequence[Any]) -> TodoState:
    deps = row[7]
    return TodoState(
        num=row[0], content=row[1], active_form=row[2], status=row[3], priority=row[4],
        position=row[5], stage=row[6], depends_on=json.loads(deps) if deps != "[]" else [],
        blocked_reason=row[8], origin=row[9], created_at=row[10], updated_at=row[11],
        claimed_by=row[12], claimed_at=row[13], lease_s=row[14])


def todo_values(t: TodoState) -> list[Any]:
    return [t.num, t.content, t.active_form, t.status, t.priority, t.position, t.stage,
            dumps(t.depends_on) if t.depends_on else "[]", t.blocked_reason, t.origin,
            t.created_at, t.updated_at, t.claimed_by, t.claimed_at, t.lease_s]


def run_from_row(row: Sequence[Any]) -> RunState:
    data = dict(zip(RUN_COLS, row, strict=True))
    for name in RUN_JSON:
        data[name] = json.loads(data[name]) if data[name] else None
    return RunState(**data)


def run_values(r: RunState) -> list[Any]:
    values = [getattr(r, c) for c in RUN_COLS]
    for name in RUN_JSON:
        i = RUN_COLS.index(name)
        values[i] = dumps(values[i]) if values[i] is not None else None
    return values


def verification_values(v: VerificationState, sid: int) -> tuple[Any, ...]:
    return (v.id, sid, v.todo_id, v.run_id, v.kind, v.artifact, v.sha256, v.passed, v.verdict,
            dumps(v.checks), dumps(v.metrics), dumps(v.gate), v.created_at)


def artifact_values(a: ArtifactState, sid: int) -> tuple[Any, ...]:
    return (a.id, sid, a.run_id, a.todo_id, a.path, a.sha256, a.size, a.kind, a.created_at)


def event_from_row(r: Sequence[Any]) -> Event:
    return Event(seq=r[0], session_id=r[1], n=r[2], ts=r[3], actor=r[4], kind=r[5],
                 todo_id=r[6], payload=json.loads(r[7]), ref=r[8])


VERIFICATION_COLS = ("id, todo_id, run_id, kind, artifact, sha256, passed, verdict, checks, "
                     "metrics, gate, created_at")
ARTIFACT_COLS = "id, run_id, todo_id, path, sha256, size, kind, created_at"


def verification_from_row(r: Sequence[Any]) -> VerificationState:
    return VerificationState(id=r[0], todo_id=r[1], run_id=r[2], kind=r[3], artifact=r[4],
                             sha256=r[5], passed=bool(r[6]), verdict=r[7],
                             checks=json.loads(r[8]), metrics=json.loads(r[9]),
                             gate=json.loads(r[10]), created_at=r[11])


def artifact_from_row(r: Sequence[Any]) -> ArtifactState:
    return ArtifactState(id=r[0], run_id=r[1], todo_id=r[2], path=r[3], sha256=r[4],
                         size=r[5], kind=r[6], created_at=r[7])
