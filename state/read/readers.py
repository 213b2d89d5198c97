"""Reading the store: sessions, todos, events, runs, logs, verifications, artifacts,
agent views, and the state at any event.

Plain SQL on DB-API cursors (:meth:`state.db.connection.Connections.reader`), not the ORM:
the rows become the fold's own dataclasses either way, and the ORM's import alone
(SQLAlchemy and SQLModel, ~0.4 s) was most of what an agent's ``todoread`` cost.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from state.db.connection import Connections, paramstyle_sql
from state.db.dialect import clock_sql
from state.db.sql import (
    ARTIFACT_COLS,
    EVENT_COLS,
    RUN_COLS,
    TODO_COLS,
    VERIFICATION_COLS,
    artifact_from_row,
    event_from_row,
    run_from_row,
    todo_from_row,
    verification_from_row,
)
from state.errors import NotFound
from state.fold import (
    ArtifactState,
    Event,
    RunState,
    SessionState,
    TodoState,
    VerificationState,
    apply,
)
from state.leases import Lease, lease_from_row
from state.retry import again
from state.series import SERIES_COLS, SeriesPoint, point_from_row

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class SessionInfo:
    """A row of ``sessions``."""

    id: int
    name: str
    created_at: str
    pipeline: str | None = None
    parent_id: int | None = None
    fork_n: int | None = None


_SESSION_COLS = "id, name, created_at, pipeline, parent_id, fork_n"
_RUNS = f"SELECT {', '.join(RUN_COLS)} FROM runs"


def _where(filters: Sequence[tuple[str, Any]]) -> tuple[str, list[Any]]:
    """`` WHERE a = ? AND b = ?`` for the filters whose value is not None."""
    used = [(col, v) for col, v in filters if v is not None]
    if not used:
        return "", []
    return " WHERE " + " AND ".join(f"{col} = ?" for col, _ in used), [v for _, v in used]


def _repeatable(fn: F) -> F:
    """A read is simply read again while the store is unreachable (state/retry.py)."""
    @functools.wraps(fn)
    def read(*args: Any, **kwargs: Any) -> Any:
        return again(lambda: fn(*args, **kwargs))
    return read  # type: ignore[return-value]


class Readers:
    """The read side of :class:`state.store.Store` (which provides ``_conn``, ``dialect``
    and the prepared statements ``_q``)."""

    _conn: Connections
    dialect: str
    _q: dict[str, str]

    def _sql(self, sql: str) -> str:
        if "{CLOCK}" in sql:
            sql = sql.replace("{CLOCK}", clock_sql(self.dialect))
        return paramstyle_sql(sql, self.dialect)

    @_repeatable
    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._conn.reader() as cur:
            cur.execute(self._sql(sql), tuple(args))
            return cur.fetchall()

    @_repeatable
    def _first(self, sql: str, args: Sequence[Any] = ()) -> Any:
        with self._conn.reader() as cur:
            cur.execute(self._sql(sql), tuple(args))
            return cur.fetchone()

    # -- sessions ---------------------------------------------------------------------------
    def sessions(self) -> list[SessionInfo]:
        return [SessionInfo(*r) for r in self._all(
            f"SELECT {_SESSION_COLS} FROM sessions ORDER BY id")]

    def session_by_name(self, name: str) -> SessionInfo | None:
        row = self._first(f"SELECT {_SESSION_COLS} FROM sessions WHERE name = ?", (name,))
        return SessionInfo(*row) if row else None

    def session_by_id(self, sid: int) -> SessionInfo | None:
        row = self._first(f"SELECT {_SESSION_COLS} FROM sessions WHERE id = ?", (sid,))
        return SessionInfo(*row) if row else None

    @_repeatable
    def session_counts(self) -> dict[int, dict[str, int]]:
        """Per session: todos per status, and the number of events."""
        out: dict[int, dict[str, int]] = {}
        with self._conn.reader() as cur:
            cur.execute("SELECT session_id, status, COUNT(*) FROM todos "
                        "GROUP BY session_id, status")
            for sid, status, count in cur.fetchall():
                out.setdefault(sid, {})[status] = count
            cur.execute("SELECT session_id, COUNT(*) FROM events GROUP BY session_id")
            for sid, count in cur.fetchall():
                out.setdefault(sid, {})["events"] = count
        return out

    # -- todos and events -------------------------------------------------------------------
    def todos(self, session_id: int) -> list[TodoState]:
        return [todo_from_row(r) for r in self._all(
            f"SELECT {', '.join(TODO_COLS)} FROM todos WHERE session_id = ?", (session_id,))]

    def todo(self, session_id: int, num: int) -> TodoState:
        row = self._first(f"SELECT {', '.join(TODO_COLS)} FROM todos "
                          "WHERE session_id = ? AND num = ?", (session_id, num))
        if row is None:
            sess = self.session_by_id(session_id)
            raise NotFound(f"unknown todo t{num}",
                           where=f"session {sess.name if sess else session_id}")
        return todo_from_row(row)

    def events(self, session_id: int | None = None, *, todo_id: int | None = None,
               after_n: int = 0, upto_n: int | None = None, kinds: Sequence[str] = (),
               limit: int | None = None, ref: str | None = None) -> list[Event]:
        where, args = _where([("session_id", session_id), ("todo_id", todo_id),
                              ("ref", ref)])
        extra = []
        if after_n:
            extra.append("n > ?")
            args.append(after_n)
        if upto_n is not None:
            extra.append("n <= ?")
            args.append(upto_n)
        if kinds:
            extra.append(f"kind IN ({', '.join('?' for _ in kinds)})")
            args.extend(kinds)
        if extra:
            where = (where + " AND " if where else " WHERE ") + " AND ".join(extra)
        sql = f"SELECT {EVENT_COLS} FROM events{where} ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [event_from_row(r) for r in self._all(sql, args)]

    def last_n(self, session_id: int) -> int:
        row = self._first("SELECT n FROM events WHERE session_id = ? ORDER BY n DESC LIMIT 1",
                          (session_id,))
        return row[0] if row else 0

    def n_at_time(self, session_id: int, ts: str) -> int:
        """The last event number at or before time ``ts``; 0 if the session was empty then."""
        row = self._first("SELECT COALESCE(MAX(n), 0) FROM events WHERE session_id = ? "
                          "AND ts <= ?", (session_id, ts))
        return row[0] if row else 0

    def _reader(self) -> Any:
        """A DB-API cursor on a pooled connection (for :mod:`state.maintain.rebuild`)."""
        return self._conn.reader()

    @_repeatable
    def state_at(self, session_id: int, n: int | None = None) -> SessionState:
        """The session as it was just after event ``n`` (default: now).

        Seeks the nearest snapshot at or before ``n`` and folds forward from there (at
        most ``SNAPSHOT_EVERY - 1`` events).
        """
        q = self._q
        with self._conn.reader() as cur:
            if n is None:
                cur.execute(q["last_snapshot"], (session_id,))
            else:
                cur.execute(q["snapshot_at"], (session_id, n))
            row = cur.fetchone()
            state = (SessionState.from_json(json.loads(row[0])) if row is not None
                     else SessionState(session_id=session_id))
            if n is None:
                cur.execute(q["events_after"], (session_id, state.n))
            else:
                cur.execute(q["events_between"], (session_id, state.n, n))
            for r in cur.fetchall():
                apply(state, event_from_row(r))
        return state

    def iter_events(self, session_id: int, *, after_n: int = 0, upto_n: int | None = None,
                    batch: int = 2000) -> Iterator[Event]:
        """A session's events in order, read ``batch`` at a time (bounded memory).

        Event numbers have no gaps, so pages are plain ranges of ``n``.
        """
        end = self.last_n(session_id) if upto_n is None else upto_n
        last = after_n
        while last < end:
            hi = min(last + batch, end)
            rows = self._all(self._q["events_between"], (session_id, last, hi))
            for r in rows:
                yield event_from_row(r)
            last = hi

    # -- runs, logs, verifications, artifacts ---------------------------------------------
    def runs(self, session_id: int | None = None, *, todo_id: int | None = None
             ) -> list[RunState]:
        where, args = _where([("session_id", session_id), ("todo_id", todo_id)])
        return [run_from_row(r) for r in self._all(f"{_RUNS}{where} ORDER BY id", args)]

    def run(self, run_id: int) -> tuple[int, RunState]:
        """(session id, run) for a store-wide run id."""
        row = self._first(f"SELECT session_id, {', '.join(RUN_COLS)} FROM runs WHERE id = ?",
                          (run_id,))
        if row is None:
            raise NotFound(f"unknown run r{run_id}")
        return row[0], run_from_row(row[1:])

    @_repeatable
    def log(self, run_id: int, offset: int = 0) -> tuple[str, int]:
        """The run's stored log from byte ``offset``: (text, offset to ask for next)."""
        with self._conn.reader() as cur:
            cur.execute(self._sql("SELECT start, data FROM run_logs WHERE run_id = ? AND "
                                  "start >= ? ORDER BY start"), (run_id, offset))
            rows: list[tuple[int, str]] = list(cur.fetchall())
            if offset:
                # The chunk straddling ``offset`` (stored logs are chunked as they arrived).
                cur.execute(self._sql("SELECT start, data FROM run_logs WHERE run_id = ? AND "
                                      "start < ? ORDER BY start DESC LIMIT 1"),
                            (run_id, offset))
                prev = cur.fetchone()
                if prev is not None:
                    raw = prev[1].encode()
                    skip = offset - prev[0]
                    if skip < len(raw):
                        rows.insert(0, (offset, raw[skip:].decode(errors="replace")))
        data = "".join(r[1] for r in rows)
        end = rows[-1][0] + len(rows[-1][1].encode()) if rows else offset
        return data, end

    def log_end(self, run_id: int) -> int:
        """The byte offset just past the run's stored log (0 if none): where a tail starts."""
        row = self._first("SELECT start, data FROM run_logs WHERE run_id = ? "
                          "ORDER BY start DESC LIMIT 1", (run_id,))
        return row[0] + len(row[1].encode()) if row is not None else 0

    def series(self, run_ids: Sequence[int], *, after: int = -1) -> list[SeriesPoint]:
        """The points the runs recorded, run by run, each in the order its lines came;
        ``after``: only those whose line starts past that byte (a live chart's news)."""
        if not run_ids:
            return []
        marks = ", ".join("?" for _ in run_ids)
        return [point_from_row(r) for r in self._all(
            f"SELECT {SERIES_COLS} FROM run_series WHERE run_id IN ({marks}) AND start > ? "
            "ORDER BY run_id, start", [*run_ids, after])]

    def series_runs(self, session_id: int) -> dict[int, int]:
        """Run id -> how many points it recorded, for the session's runs that have any."""
        return {r[0]: r[1] for r in self._all(
            "SELECT s.run_id, COUNT(*) FROM run_series s JOIN runs r ON r.id = s.run_id "
            "WHERE r.session_id = ? GROUP BY s.run_id", (session_id,))}

    def verifications(self, session_id: int | None = None, *,
                      todo_id: int | None = None) -> list[VerificationState]:
        where, args = _where([("session_id", session_id), ("todo_id", todo_id)])
        return [verification_from_row(r) for r in self._all(
            f"SELECT {VERIFICATION_COLS} FROM verifications{where} ORDER BY id", args)]

    def artifacts(self, session_id: int | None = None, *,
                  run_id: int | None = None) -> list[ArtifactState]:
        where, args = _where([("session_id", session_id), ("run_id", run_id)])
        return [artifact_from_row(r) for r in self._all(
            f"SELECT {ARTIFACT_COLS} FROM artifacts{where} ORDER BY id", args)]

    def _full_extras(self, cur: Any, session_id: int) -> tuple[list[VerificationState],
                                                             list[ArtifactState]]:
        """A session's verifications and artifacts, on the caller's cursor (a writer's)."""
        cur.execute(self._sql(f"SELECT {VERIFICATION_COLS} FROM verifications "
                              "WHERE session_id = ?"), (session_id,))
        verifs = [verification_from_row(r) for r in cur.fetchall()]
        cur.execute(self._sql(f"SELECT {ARTIFACT_COLS} FROM artifacts WHERE session_id = ?"),
                    (session_id,))
        return verifs, [artifact_from_row(r) for r in cur.fetchall()]

    # -- leases (state/leases.py) ------------------------------------------------------------
    def lease_check(self, session_id: int, actor: str = "") -> tuple[float, float | None, int]:
        """(the store's clock, the session's earliest lease expiry or None, how many of
        the leases ``actor`` holds there were last renewed more than a tenth of their
        length ago): one query, to decide whether a write is needed at all."""
        row = self._first(self._q["lease_check"], (session_id, session_id, actor))
        return float(row[0]), (float(row[1]) if row[1] is not None else None), int(row[2])

    def leases(self, session_id: int) -> tuple[float, dict[int, Lease]]:
        """(the store's clock, the session's live leases by todo number). A lease whose
        ``expires_at`` is before the clock has run out and waits for a write to end it."""
        rows = self._all(self._q["session_leases"], (session_id,))
        leases = [lease_from_row(r[1:]) for r in rows if r[1] is not None]
        return float(rows[0][0]), {lease.num: lease for lease in leases}

    # -- small things ---------------------------------------------------------------------
    def pipeline_spec(self, session_id: int) -> str | None:
        """The spec file the session's pipeline was last run from, if any."""
        row = self._first("SELECT value FROM meta WHERE key = ?",
                          (f"pipeline_spec:{session_id}",))
        return row[0] if row else None

    def agent_view(self, session_id: int, actor: str) -> Any:
        row = self._first(self._q["get_view"], (session_id, actor))
        return json.loads(row[0]) if row and row[0] else None

    def agent_views(self, session_id: int) -> list[tuple[str, str, str]]:
        """(actor, view JSON text, updated_at) for every agent view of the session."""
        return [(r[0], r[1], r[2]) for r in self._all(
            "SELECT actor, view, updated_at FROM agent_views WHERE session_id = ? "
            "ORDER BY actor", (session_id,))]

    def source_seen(self, key: str) -> tuple[int, int] | None:
        """(session id, event number) where import source ``key`` went, or None."""
        row = self._first(self._q["get_source"], (key,))
        return (row[0], row[1]) if row else None

    def projection_state(self, session_id: int) -> SessionState:
        """The stored projection as a SessionState (for rebuild comparisons)."""
        st = SessionState(session_id=session_id)
        st.todos = {t.num: t for t in self.todos(session_id)}
        st.runs = {r.id: r for r in self.runs(session_id)}
        st.verifications = {v.id: v for v in self.verifications(session_id)}
        st.artifacts = {a.id: a for a in self.artifacts(session_id)}
        st.n = self.last_n(session_id)
        row = self._first("SELECT COALESCE(MAX(todo_id), 0) FROM events WHERE session_id = ?",
                          (session_id,))
        st.next_num = max(row[0] if row else 0, max(st.todos, default=0)) + 1
        return st


__all__ = ["Readers", "SessionInfo"]
