"""The store: open a database, write events with their projections, read state back.

Writes go through :meth:`Store.write`, which yields a :class:`Tx`. A Tx holds the store's
write lock from its first statement (``BEGIN IMMEDIATE`` on SQLite, an advisory
transaction lock on PostgreSQL), loads the session's current state from the projection,
lets the caller emit events (each folded into that state at once by
:func:`state.fold.apply`), and on exit writes the events, the projection rows they
touched, a snapshot when one is due, and commits, all in one transaction.

The write path uses the DB-API connection directly: the ORM's unit of work costs ~20x a
raw write (docs/PERFORMANCE.md, "The store"), and an agent's todo write is the hot path.
Readers use SQLModel.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import fields
from datetime import datetime, timezone
from functools import cached_property, lru_cache
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session as OrmSession
from sqlmodel import col, func, select

from state import migrations
from state.engine import (
    WRITE_OPTION,
    display_url,
    is_sqlite,
    make_engine,
    normalize_url,
    notify_sql,
    paramstyle_sql,
    public_url,
    write_lock_sql,
)
from state.errors import InvalidChange, NotFound, StoreError, StoreUnavailable
from state.fold import (
    PRIORITIES,
    RUN_MUTABLE,
    STATUSES,
    TODO_MUTABLE,
    ArtifactState,
    Event,
    RunState,
    SessionState,
    TodoState,
    VerificationState,
    apply,
)
from state.interrupts import InterruptGate
from state.models import (
    ALL_TABLES,
    ArtifactRow,
    EventRow,
    RunLogRow,
    RunRow,
    SessionRow,
    TodoRow,
    VerificationRow,
)
from state.watch import Watch

T = TypeVar("T")

# Snapshot a session's state every this many events (chosen by bench/replay.py).
SNAPSHOT_EVERY = 256


def utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def normalize_ts(value: str | float | int | datetime) -> str:
    """Any timestamp we accept -> our canonical sortable text form (UTC, microseconds, Z)."""
    if isinstance(value, (int, float)):
        # Epoch seconds or milliseconds (agents use both).
        secs = value / 1000 if value > 1e11 else value
        dt = datetime.fromtimestamp(secs, tz=timezone.utc)
    elif isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    else:
        s = value.strip()
        if s.endswith("Z"):
            s = s[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            raise InvalidChange(f"not an ISO-8601 timestamp: {value!r}") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def nul_at(obj: Any, path: str = "") -> str | None:
    """Where a NUL character hides in ``obj`` (a dotted path), or None.

    PostgreSQL's TEXT cannot hold NUL, so no backend may store one: a store must copy
    between SQLite and PostgreSQL without loss, and behave the same on both.
    """
    if isinstance(obj, str):
        return (path or "text") if "\x00" in obj else None
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = nul_at(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = nul_at(v, f"{path}[{i}]")
            if found:
                return found
    return None


_TODO_COLS = ("num", "content", "active_form", "status", "priority", "position", "stage",
              "depends_on", "blocked_reason", "origin", "created_at", "updated_at")
_RUN_COLS = tuple(f.name for f in fields(RunState))
_EVENT_COLS = "seq, session_id, n, ts, actor, kind, todo_id, payload, ref"
_RUN_JSON = ("result", "job")

_SQL: dict[str, str] = {
    "max_seq": "SELECT seq FROM events ORDER BY seq DESC LIMIT 1",
    "max_n": "SELECT n FROM events WHERE session_id = ? ORDER BY n DESC LIMIT 1",
    "max_todo": "SELECT todo_id FROM events WHERE session_id = ? AND todo_id IS NOT NULL "
                "ORDER BY todo_id DESC LIMIT 1",
    # One round trip for the three numbers every write needs (each an index seek), and
    # the writer's agent view, which an agent's write reads next (a primary-key lookup;
    # on PostgreSQL a round trip saved is ~10% of an agent write).
    "load_tops": "SELECT (SELECT seq FROM events ORDER BY seq DESC LIMIT 1), "
                 "(SELECT n FROM events WHERE session_id = ? ORDER BY n DESC LIMIT 1), "
                 "(SELECT todo_id FROM events WHERE session_id = ? AND todo_id IS NOT NULL "
                 "ORDER BY todo_id DESC LIMIT 1), "
                 "(SELECT view FROM agent_views WHERE session_id = ? AND actor = ?)",
    "load_todos": f"SELECT {', '.join(_TODO_COLS)} FROM todos WHERE session_id = ?",
    "load_runs": f"SELECT {', '.join(_RUN_COLS)} FROM runs WHERE session_id = ?",
    "insert_event": "INSERT INTO events (seq, session_id, n, ts, actor, kind, todo_id, payload, ref)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "insert_todo": f"INSERT INTO todos (session_id, {', '.join(_TODO_COLS)}) VALUES "
                   f"(?, {', '.join('?' for _ in _TODO_COLS)})",
    "update_todo": "UPDATE todos SET " + ", ".join(f"{c} = ?" for c in _TODO_COLS[1:])
                   + " WHERE session_id = ? AND num = ?",
    "delete_todo": "DELETE FROM todos WHERE session_id = ? AND num = ?",
    "insert_run": f"INSERT INTO runs (session_id, {', '.join(_RUN_COLS)}) VALUES "
                  f"(?, {', '.join('?' for _ in _RUN_COLS)})",
    "update_run": "UPDATE runs SET " + ", ".join(f"{c} = ?" for c in _RUN_COLS[1:])
                  + " WHERE id = ?",
    "insert_verification": "INSERT INTO verifications (id, session_id, todo_id, run_id, kind, "
                           "artifact, sha256, passed, verdict, checks, metrics, gate, created_at) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "insert_artifact": "INSERT INTO artifacts (id, session_id, run_id, todo_id, path, sha256, "
                       "size, kind, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "last_snapshot": "SELECT state FROM snapshots WHERE session_id = ? ORDER BY n DESC LIMIT 1",
    "snapshot_at": "SELECT state FROM snapshots WHERE session_id = ? AND n <= ? "
                   "ORDER BY n DESC LIMIT 1",
    "events_after": f"SELECT {_EVENT_COLS} FROM events WHERE session_id = ? AND n > ? ORDER BY n",
    "events_between": f"SELECT {_EVENT_COLS} FROM events WHERE session_id = ? AND n > ? "
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
    "update_session_pipeline": "UPDATE sessions SET pipeline = ? WHERE id = ?",
    "upsert_meta": "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                   "SET value = excluded.value",
}


_MULTI_ROW_MAX = 100


@lru_cache(maxsize=_MULTI_ROW_MAX)
def _multi_row_insert(single: str, count: int) -> str:
    """``INSERT ... VALUES (%s, ...)`` -> the same with ``count`` rows of values."""
    head, _, values = single.partition(" VALUES ")
    return f"{head} VALUES {', '.join([values] * count)}"


def _todo_from_row(row: Sequence[Any]) -> TodoState:
    deps = row[7]
    return TodoState(
        num=row[0], content=row[1], active_form=row[2], status=row[3], priority=row[4],
        position=row[5], stage=row[6], depends_on=json.loads(deps) if deps != "[]" else [],
        blocked_reason=row[8], origin=row[9], created_at=row[10], updated_at=row[11])


def _todo_values(t: TodoState) -> list[Any]:
    return [t.num, t.content, t.active_form, t.status, t.priority, t.position, t.stage,
            dumps(t.depends_on) if t.depends_on else "[]", t.blocked_reason, t.origin,
            t.created_at, t.updated_at]


def _run_from_row(row: Sequence[Any]) -> RunState:
    data = dict(zip(_RUN_COLS, row, strict=True))
    for name in _RUN_JSON:
        data[name] = json.loads(data[name]) if data[name] else None
    return RunState(**data)


def _run_values(r: RunState) -> list[Any]:
    values = [getattr(r, c) for c in _RUN_COLS]
    for name in _RUN_JSON:
        i = _RUN_COLS.index(name)
        values[i] = dumps(values[i]) if values[i] is not None else None
    return values


def _verification_values(v: VerificationState, sid: int) -> tuple[Any, ...]:
    return (v.id, sid, v.todo_id, v.run_id, v.kind, v.artifact, v.sha256, v.passed, v.verdict,
            dumps(v.checks), dumps(v.metrics), dumps(v.gate), v.created_at)


def _artifact_values(a: ArtifactState, sid: int) -> tuple[Any, ...]:
    return (a.id, sid, a.run_id, a.todo_id, a.path, a.sha256, a.size, a.kind, a.created_at)


class Tx:
    """One write transaction on one session. Create with :meth:`Store.write`."""

    def __init__(self, store: Store, cur: Any, session_id: int, actor: str, ref: str | None):
        self.store = store
        self.session_id = session_id
        self.actor = actor
        self.ref = ref
        self._cur = cur
        self._q = store._q
        self.events: list[Event] = []
        self._payloads: list[str] = []  # each event's payload as stored (JSON text)
        self._touched: dict[tuple[str, int], None] = {}
        self._views: dict[str, str | None] = {}
        self._new_ids: dict[str, int] = {}
        self._runs_loaded = False
        self._logs: list[tuple[int, int, str]] = []
        self._existing_todos: set[int] = set()
        self._existing_runs: set[int] = set()
        self._snapshots: list[tuple[int, int, int, str]] = []
        self._sources: list[tuple[str, int, int, str]] = []
        self._source_keys: set[str] = set()
        self.emitted = 0
        self._wrote = False  # a write that is not an event (agent view, session pipeline)
        self._view_writes: dict[str, tuple[str, str]] = {}
        self._load()

    # -- loading -------------------------------------------------------------------------
    def _one(self, name: str, *args: Any) -> Any:
        self._cur.execute(self._q[name], args)
        row = self._cur.fetchone()
        return row[0] if row else None

    def _load(self) -> None:
        sid = self.session_id
        self._cur.execute(self._q["load_tops"], (sid, sid, sid, self.actor))
        seq, n, top, self._views[self.actor] = self._cur.fetchone()
        self._seq = seq or 0
        n = n or 0
        cached = self.store._todo_cache.pop(sid, None)
        if cached is not None and cached[0] == n:
            # Nobody wrote to this session since our own last commit: the projection is
            # what we left. (n moves with every event of the session, from any writer.)
            todos = cached[1]
        else:
            self._cur.execute(self._q["load_todos"], (sid,))
            todos = {row[0]: _todo_from_row(row) for row in self._cur.fetchall()}
        next_num = max(top or 0, max(todos, default=0)) + 1
        self.state = SessionState(session_id=sid, n=n, next_num=next_num, todos=todos)
        self._start_n = n
        self._existing_todos = set(todos)

    def load_runs(self) -> dict[int, RunState]:
        """The session's runs (loaded once per transaction, on first use)."""
        if self._runs_loaded:
            return self.state.runs
        self._cur.execute(self._q["load_runs"], (self.session_id,))
        for row in self._cur.fetchall():
            run = _run_from_row(row)
            self.state.runs[run.id] = run
        self._existing_runs = set(self.state.runs)
        self._runs_loaded = True
        return self.state.runs

    # -- emitting ------------------------------------------------------------------------
    def emit(self, kind: str, *, todo_id: int | None = None, payload: dict[str, Any] | None = None,
             ts: str | None = None, ref: str | None = None, actor: str | None = None) -> Event:
        if kind.startswith("run."):
            self.load_runs()
        payload = payload or {}
        actor = actor or self.actor
        ref = ref if ref is not None else self.ref
        # Encoded once, here: the text is both what is stored and the cheap NUL test
        # (JSON spells NUL \u0000), so the field-by-field search runs only on a hit.
        text_ = dumps(payload)
        if "\\u0000" in text_ or "\x00" in actor or (ref is not None and "\x00" in ref):
            bad = nul_at(payload) or nul_at({"actor": actor, "ref": ref})
            if bad:
                raise InvalidChange(f"{kind}: {bad} contains a NUL character, which the "
                                    "store cannot keep (PostgreSQL's text has no NUL)")
        self._seq += 1
        ev = Event(seq=self._seq, session_id=self.session_id, n=self.state.n + 1,
                   ts=ts or utcnow(), actor=actor, kind=kind, todo_id=todo_id,
                   payload=payload, ref=ref)
        for key in apply(self.state, ev):
            self._touched[key] = None
        self.events.append(ev)
        self._payloads.append(text_)
        self.emitted += 1
        if ev.n % SNAPSHOT_EVERY == 0:
            # Exactly every K events, however many one transaction holds, so a seek never
            # folds more than K - 1 events.
            self._snapshot()
        return ev

    def new_id(self, table: str) -> int:
        """A fresh store-wide id for a run, verification or artifact (we hold the lock)."""
        if table not in self._new_ids:
            self._new_ids[table] = self._one(f"max_id_{table}") or 0
        self._new_ids[table] += 1
        return self._new_ids[table]

    # -- todo primitives: validated, and silent when nothing changes ----------------------
    def create_todo(self, content: str, *, status: str = "pending", priority: str = "medium",
                    position: float | None = None, active_form: str | None = None,
                    stage: str | None = None, depends_on: Sequence[int] = (),
                    blocked_reason: str | None = None, origin: str = "human",
                    num: int | None = None, ts: str | None = None,
                    ref: str | None = None) -> TodoState:
        _check_status(status)
        _check_priority(priority)
        if not content:
            raise InvalidChange("a todo needs content")
        num = num if num is not None else self.state.next_num
        if num in self.state.todos:
            raise InvalidChange(f"todo t{num} already exists")
        for d in depends_on:
            if d not in self.state.todos:
                raise NotFound(f"unknown todo t{d}", where="depends_on")
        if position is None:
            position = max((t.position for t in self.state.todos.values()), default=0.0) + 1.0
        payload = {"content": content, "status": status, "priority": priority,
                   "position": position, "origin": origin}
        for key, value in (("active_form", active_form), ("stage", stage),
                           ("blocked_reason", blocked_reason)):
            if value is not None:
                payload[key] = value
        if depends_on:
            payload["depends_on"] = list(depends_on)
        self.emit("todo.created", todo_id=num, payload=payload, ts=ts, ref=ref)
        return self.state.todos[num]

    def update_todo(self, num: int, *, ts: str | None = None, ref: str | None = None,
                    **changes: Any) -> dict[str, list[Any]]:
        """Emit one ``todo.updated`` with the fields that really change; none -> no event."""
        todo = self.todo(num)
        diff: dict[str, list[Any]] = {}
        for name, value in changes.items():
            if name not in TODO_MUTABLE:
                raise InvalidChange(f"unknown todo field {name!r}")
            if name == "status":
                _check_status(value)
            elif name == "priority":
                _check_priority(value)
            elif name == "depends_on":
                value = list(value)
            if getattr(todo, name) != value:
                diff[name] = [getattr(todo, name), value]
        if diff:
            self.emit("todo.updated", todo_id=num, payload={"changes": diff}, ts=ts, ref=ref)
        return diff

    def remove_todo(self, num: int, *, reason: str, ts: str | None = None,
                    ref: str | None = None) -> None:
        todo = self.todo(num)
        self.emit("todo.removed", todo_id=num, ts=ts, ref=ref,
                  payload={"content": todo.content, "status": todo.status, "reason": reason})

    def todo(self, num: int) -> TodoState:
        try:
            return self.state.todos[num]
        except KeyError:
            self._cur.execute(self._q["session_name"], (self.session_id,))
            row = self._cur.fetchone()
            name = row[0] if row else self.session_id
            raise NotFound(f"unknown todo t{num}", where=f"session {name}") from None

    # -- runs, verifications, artifacts, logs --------------------------------------------
    def queue_run(self, *, todo_id: int | None, host: str, stage: str | None = None,
                  attempt: int = 1, command: str | None = None, ts: str | None = None,
                  **extra: Any) -> RunState:
        rid = self.new_id("runs")
        payload = {"run": rid, "host": host, "stage": stage, "attempt": attempt, "state": "queued",
                   "command": command, **extra}
        self.emit("run.queued", todo_id=todo_id, payload=payload, ts=ts)
        return self.state.runs[rid]

    def update_run(self, run_id: int, *, ts: str | None = None,
                   **changes: Any) -> dict[str, list[Any]]:
        self.load_runs()
        run = self.state.runs.get(run_id)
        if run is None:
            raise NotFound(f"unknown run r{run_id}")
        diff = {k: [getattr(run, k), v] for k, v in changes.items()
                if k in RUN_MUTABLE and getattr(run, k) != v}
        unknown = set(changes) - set(RUN_MUTABLE)
        if unknown:
            raise InvalidChange(f"unknown run field(s) {sorted(unknown)}")
        if diff:
            self.emit("run.updated", todo_id=run.todo_id, payload={"run": run_id, "changes": diff},
                      ts=ts)
        return diff

    def record_verification(self, *, todo_id: int | None, ts: str | None = None,
                            **fields_: Any) -> VerificationState:
        vid = self.new_id("verifications")
        self.emit("verification.recorded", todo_id=todo_id,
                  payload={"verification": vid, **fields_}, ts=ts)
        return self.state.verifications[vid]

    def record_artifact(self, *, todo_id: int | None, ts: str | None = None,
                        **fields_: Any) -> ArtifactState:
        aid = self.new_id("artifacts")
        self.emit("artifact.recorded", todo_id=todo_id, payload={"artifact": aid, **fields_},
                  ts=ts)
        return self.state.artifacts[aid]

    def append_log(self, run_id: int, offset: int, data: str) -> None:
        """Job output is data, not history: it is stored without an event.

        NUL bytes become SUB (0x1A, ASCII's "substitute"): one byte for one, so byte
        offsets stay true, and PostgreSQL can store the text.
        """
        self._logs.append((run_id, offset, data.replace("\x00", "\x1a")))

    def set_session_pipeline(self, pipeline: str, spec_path: str | None = None) -> None:
        """Name the session's pipeline (and remember its spec file, for `run_stage`)."""
        self._wrote = True
        self._cur.execute(self._q["update_session_pipeline"], (pipeline, self.session_id))
        if spec_path is not None:
            self._cur.execute(self._q["upsert_meta"],
                              (f"pipeline_spec:{self.session_id}", spec_path))

    # -- agent views (the base of the three-way merge) ----------------------------------
    def agent_view_text(self, actor: str) -> str | None:
        """The stored view of ``actor`` as JSON text (callers parse and may cache it)."""
        if actor not in self._views:
            self._views[actor] = self._one("get_view", self.session_id, actor)
        return self._views[actor]

    def agent_view(self, actor: str) -> Any:
        raw = self.agent_view_text(actor)
        return json.loads(raw) if raw else None

    def set_agent_view(self, actor: str, view: Any, *, ts: str | None = None) -> None:
        text_ = view if isinstance(view, str) else json.dumps(view, ensure_ascii=False,
                                                                separators=(",", ":"))
        self._views[actor] = text_
        # Written at flush, with everything else (one round trip fewer on PostgreSQL).
        self._view_writes[actor] = (text_, ts or utcnow())
        self._wrote = True

    # -- flushing ------------------------------------------------------------------------
    def _flush(self) -> None:
        """Write what the transaction did: events, projection rows, logs, agent views,
        snapshots, import sources, and (PostgreSQL) the notification for watchers.

        (psycopg's pipeline mode was tried for these writes: slower here, its sync costs
        more than the ~30 µs round trips it saves on a local server.)
        """
        q, cur = self._q, self._cur
        if self.events:
            self._flush_events()
        if self._logs:
            cur.executemany(q["insert_log"], self._logs)
        for actor, (text_, ts) in self._view_writes.items():
            cur.execute(q["upsert_view"], (self.session_id, actor, text_, ts))
        if self._snapshots:
            cur.executemany(q["insert_snapshot"], self._snapshots)
        if self._sources:
            cur.executemany(q["insert_source"], self._sources)
        notify = self.store._notify
        if notify and (self.events or self._logs or self._wrote):
            cur.execute(notify, (str(self._seq),))

    def flush(self) -> None:
        """Write everything emitted so far and keep the transaction open.

        A long import calls this now and then so that its memory stays bounded; the
        transaction still commits or rolls back as a whole.
        """
        self._flush()
        self.events = []
        self._payloads = []
        self._touched = {}
        self._logs = []
        self._snapshots = []
        self._sources = []
        self._view_writes = {}

    def _flush_events(self) -> None:
        q, cur, sid = self._q, self._cur, self.session_id
        rows = [(e.seq, e.session_id, e.n, e.ts, e.actor, e.kind, e.todo_id, text_, e.ref)
                for e, text_ in zip(self.events, self._payloads, strict=True)]
        if self.store.dialect == "postgresql" and len(rows) <= _MULTI_ROW_MAX:
            # One multi-row INSERT: psycopg's executemany syncs a pipeline, which costs
            # more than the statement for the few events of an everyday write.
            cur.execute(_multi_row_insert(q["insert_event"], len(rows)),
                        [v for row in rows for v in row])
        else:
            cur.executemany(q["insert_event"], rows)
        st = self.state
        for kind, key in self._touched:
            if kind == "todo":
                t = st.todos.get(key)
                if t is None:
                    continue  # created and removed in the same transaction
                if key in self._existing_todos:
                    cur.execute(q["update_todo"], [*_todo_values(t)[1:], sid, key])
                else:
                    cur.execute(q["insert_todo"], [sid, *_todo_values(t)])
                    self._existing_todos.add(key)
            elif kind == "todo-":
                if key in self._existing_todos:
                    cur.execute(q["delete_todo"], (sid, key))
                    self._existing_todos.discard(key)
            elif kind == "run":
                r = st.runs[key]
                if key in self._existing_runs:
                    cur.execute(q["update_run"], [*_run_values(r)[1:], key])
                else:
                    cur.execute(q["insert_run"], [sid, *_run_values(r)])
                    self._existing_runs.add(key)
            elif kind == "verification":
                v = st.verifications[key]
                cur.execute(q["insert_verification"], _verification_values(v, sid))
            elif kind == "artifact":
                a = st.artifacts[key]
                cur.execute(q["insert_artifact"], _artifact_values(a, sid))

    def _snapshot(self) -> None:
        """A snapshot holds the whole session: load what this transaction did not."""
        self.load_runs()
        st = self.state
        # Verifications and artifacts are append-only; read them whole for the snapshot
        # (those emitted in this transaction are in the state already).
        full = self.store._full_extras(self._cur, self.session_id)
        st.verifications.update({v.id: v for v in full[0] if v.id not in st.verifications})
        st.artifacts.update({a.id: a for a in full[1] if a.id not in st.artifacts})
        self._snapshots.append((self.session_id, st.n, self._seq, dumps(st.to_json())))

    # -- import sources (idempotent imports) ---------------------------------------------
    def source_seen(self, key: str) -> tuple[int, int] | None:
        """(session id, event number) where source ``key`` was imported, or None."""
        if key in self._source_keys:
            return self.session_id, self.state.n
        self._cur.execute(self._q["get_source"], (key,))
        row = self._cur.fetchone()
        return (row[0], row[1]) if row else None

    def record_source(self, key: str) -> None:
        """Remember that source ``key`` (a transcript's tool-call id, an exported session)
        is imported, up to this session's current event."""
        self._sources.append((key, self.session_id, self.state.n, utcnow()))
        self._source_keys.add(key)


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise InvalidChange(f"unknown status {status!r} (expected one of {', '.join(STATUSES)})")


def _check_priority(priority: str) -> None:
    if priority not in PRIORITIES:
        raise InvalidChange(
            f"unknown priority {priority!r} (expected one of {', '.join(PRIORITIES)})")


class Store:
    """A harness store on SQLite or PostgreSQL. Open with :meth:`Store.open`."""

    def __init__(self, url: str):
        self.url = normalize_url(url)
        self.where = display_url(self.url)
        # Printed and used as a key in the user's config: never the password.
        self.public_url = public_url(self.url)
        self.engine: Engine = make_engine(self.url)
        self.dialect = self.engine.dialect.name
        self._q = {name: paramstyle_sql(sql, self.dialect) for name, sql in _SQL.items()}
        self._notify = notify_sql(self.dialect)
        # session id -> (last event number, todos) as of this process's last commit there.
        self._todo_cache: dict[int, tuple[int, dict[int, TodoState]]] = {}
        self._writer_conn: Any = None
        self._writer_lock = threading.Lock()
        dbapi = self.engine.dialect.dbapi
        self._dbapi_error: type[BaseException] = dbapi.Error  # type: ignore[union-attr]
        self._operational: type[BaseException] = dbapi.OperationalError  # type: ignore[union-attr]

    @classmethod
    def open(cls, url: str, *, migrate: bool = True, check: bool = True) -> Store:
        """Open the store at ``url`` (a SQLite path or an SQLAlchemy URL).

        ``migrate``: apply pending migrations (under the write lock); else refuse a store
        that needs them. ``check=False`` looks at nothing (``harness db info``/``upgrade``).
        A store with a migration this code does not know is always refused when checked.
        """
        store = cls(url)
        try:
            if check:
                todo = store.pending_migrations()
                if todo and migrate:
                    try:
                        store.upgrade()
                    except StoreError as exc:
                        if not exc.message.startswith("not allowed"):
                            raise
                        raise StoreError(
                            f"database needs {len(todo)} migration(s) that this database "
                            f"user may not apply ({exc.message})", where=store.where,
                            hint="the store's owner runs `harness db upgrade`") from None
                elif todo:
                    raise StoreError(
                        f"database needs {len(todo)} migration(s)", where=store.where,
                        hint="run `harness db upgrade`")
        except BaseException:
            store.close()
            raise
        return store

    @cached_property
    def store_id(self) -> str:
        """This store's random id (migration ``002_store_id``)."""
        with self._errors(), self.engine.connect() as conn:
            return str(conn.execute(text("SELECT value FROM meta WHERE key = 'store_id'"))
                       .scalar_one())

    # -- schema ---------------------------------------------------------------------------
    def applied_migrations(self) -> list[str]:
        with self._errors(), self.engine.connect() as conn:
            return migrations.applied(conn)

    def pending_migrations(self) -> list[str]:
        """Names of the migrations this store still needs (raises if it is too new)."""
        with self._errors(), self.engine.connect() as conn:
            return [name for name, _ in migrations.pending(conn, self.where)]

    def upgrade(self) -> list[str]:
        """Apply pending migrations in one transaction under the write lock, so that two
        harnesses opening a fresh store at once do not both create it."""
        with self.locked() as conn:
            return migrations.upgrade(conn, self.where)

    @contextmanager
    def locked(self) -> Iterator[Connection]:
        """A Core connection in a transaction that holds the store's write lock.

        For whole-store work (migrations, ``db copy``); everyday writes use :meth:`write`.
        Commits on normal exit, rolls back on an exception.
        """
        with self._errors(), self.engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                yield conn

    def table_counts(self) -> dict[str, int]:
        """Rows per table, for every table of the schema that exists here."""
        with self._errors(), self.engine.connect() as conn:
            have = set(inspect(conn).get_table_names())
            return {m.__tablename__: conn.execute(  # type: ignore[attr-defined]
                        select(func.count()).select_from(m.__table__)).scalar_one()  # type: ignore[attr-defined]
                    for m in ALL_TABLES if m.__tablename__ in have}  # type: ignore[attr-defined]

    def close(self) -> None:
        if self._writer_conn is not None:
            self._writer_conn.close()
            self._writer_conn = None
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors -------------------------------------------------------------------------
    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn driver errors into one-line StoreErrors that name the database."""
        try:
            yield
        except StoreError:
            raise
        except (DBAPIError, self._dbapi_error, sqlite3.Error) as exc:
            orig = getattr(exc, "orig", exc)
            msg = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
            low = msg.lower()
            if "locked" in low or "busy" in low or "lock timeout" in low:
                raise StoreUnavailable(
                    "database is locked by another process", where=self.where,
                    hint="wait for it to finish, or raise HARNESS_BUSY_TIMEOUT_MS") from None
            if "not a database" in low or "malformed" in low:
                raise StoreUnavailable(f"not a harness store ({msg})", where=self.where) from None
            if "permission denied" in low or "must be owner" in low:
                raise StoreError(f"not allowed ({msg})", where=self.where,
                                 hint="this database user may not make that change; "
                                      "see docs/teams.md on roles") from None
            if (isinstance(exc, OperationalError) or isinstance(orig, self._operational)
                    or "unable to open" in low or "connect" in low):
                hint = ("create it first (createdb; see docs/teams.md)"
                        if "database" in low and "does not exist" in low else None)
                raise StoreUnavailable(f"cannot use the database ({msg})",
                                       where=self.where, hint=hint) from None
            raise StoreError(f"database error ({msg})", where=self.where) from None

    # -- writing ------------------------------------------------------------------------
    def _writer(self) -> tuple[Any, bool]:
        """A DB-API connection for one write, and whether it is our kept writer.

        The first writer keeps one connection for itself: checking one out of the pool and
        back costs about as much as the write's SQL. Concurrent writers in other threads
        take pooled connections as usual.
        """
        if self._writer_lock.acquire(blocking=False):
            if self._writer_conn is None:
                try:
                    self._writer_conn = self.engine.raw_connection()
                except BaseException:
                    self._writer_lock.release()
                    raise
            return self._writer_conn, True
        return self.engine.raw_connection(), False

    def _release(self, raw: Any, kept: bool, broken: bool) -> None:
        if broken:  # never pooled again, whoever owned it
            with suppress(Exception):
                raw.invalidate()
        if not kept:
            raw.close()
            return
        if broken:
            self._writer_conn = None
        self._writer_lock.release()

    def _begin_write(self) -> tuple[Any, bool, Any]:
        """(connection, kept, cursor) with the write lock taken.

        The kept connection may have been dropped by the server while idle (a restart, an
        idle timeout): nothing is written yet, so take a fresh one and try once more.
        """
        raw, kept = self._writer()
        cur = raw.cursor()
        try:
            cur.execute(write_lock_sql(self.dialect))
            return raw, kept, cur
        except self._dbapi_error as exc:
            dropped = self.engine.dialect.is_disconnect(exc, raw.dbapi_connection, cur)
            if not dropped:
                try:
                    raw.rollback()
                except self._dbapi_error:
                    dropped = True
            self._release(raw, kept, dropped)
            if not (kept and dropped):
                raise
        raw, kept = self._writer()
        try:
            cur = raw.cursor()
            cur.execute(write_lock_sql(self.dialect))
        except BaseException:
            self._release(raw, kept, True)
            raise
        return raw, kept, cur

    @contextmanager
    def _locked(self) -> Iterator[Any]:
        """A DB-API cursor in a transaction that holds the store's write lock from its
        first statement. Commits on a normal exit, rolls back on any exception.

        Ctrl-C is held off while the lock is taken and given back (:mod:`state.interrupts`)
        and delivered inside the block that rolls back; a connection left with neither
        COMMIT nor ROLLBACK run is discarded, never reused with its transaction open."""
        gate = InterruptGate()
        with self._errors():
            try:
                gate.close()
                raw, kept, cur = self._begin_write()
                ended = False  # COMMIT or ROLLBACK ran, so the connection can be reused
                try:
                    try:
                        gate.open()
                        yield cur
                    except BaseException:
                        gate.close()
                        # The body's exception is the news; a connection that cannot roll
                        # back (psycopg interrupted mid-query) is dropped, and the server
                        # ends its transaction.
                        with suppress(self._dbapi_error):
                            self._end(raw, cur, commit=False)
                            ended = True
                        raise
                    gate.close()
                    self._end(raw, cur, commit=True)
                    ended = True
                finally:
                    self._release(raw, kept, broken=not ended)
            except BaseException:
                gate.discard()
                raise
            gate.open()

    def _end(self, raw: Any, cur: Any, *, commit: bool) -> None:
        if self.dialect == "sqlite":  # the transaction was begun by hand: end it by hand
            cur.execute("COMMIT" if commit else "ROLLBACK")
        elif commit:
            raw.commit()
        else:
            raw.rollback()

    @contextmanager
    def write(self, session_id: int, actor: str, *, ref: str | None = None) -> Iterator[Tx]:
        with self._locked() as cur:
            tx = Tx(self, cur, session_id, actor, ref)
            yield tx
            tx._flush()
        self._todo_cache[session_id] = (tx.state.n, tx.state.todos)

    @contextmanager
    def write_new(self, name: str, *, actor: str, pipeline: str | None = None,
                  parent_id: int | None = None, fork_n: int | None = None,
                  ts: str | None = None, ref: str | None = None,
                  created_by: str | None = None) -> Iterator[Tx]:
        """Create session ``name`` and write to it as ``actor``, in one transaction: a
        failed import or fork leaves no empty session behind. ``created_by`` is the actor
        of the ``session.created`` event (default ``actor``)."""
        if not name or not name.strip():
            raise InvalidChange("a session needs a name")
        if nul_at(name) or nul_at(pipeline):
            raise InvalidChange("a session name contains a NUL character")
        with self._locked() as cur:
            cur.execute(self._q["session_id"], (name,))
            if cur.fetchone():
                raise InvalidChange(f"session {name!r} already exists")
            created = ts or utcnow()
            cur.execute(self._q["insert_session"], (name, created, pipeline, parent_id, fork_n))
            cur.execute(self._q["session_id"], (name,))
            sid = cur.fetchone()[0]
            tx = Tx(self, cur, sid, actor, ref)
            payload: dict[str, Any] = {"name": name}
            if pipeline:
                payload["pipeline"] = pipeline
            if parent_id is not None:
                payload["parent_id"] = parent_id
                payload["fork_n"] = fork_n
            tx.emit("session.created", payload=payload, ts=created, actor=created_by)
            yield tx
            tx._flush()
        self._todo_cache[sid] = (tx.state.n, tx.state.todos)

    def create_session(self, name: str, *, actor: str, pipeline: str | None = None,
                       parent_id: int | None = None, fork_n: int | None = None,
                       ts: str | None = None) -> int:
        with self.write_new(name, actor=actor, pipeline=pipeline, parent_id=parent_id,
                            fork_n=fork_n, ts=ts) as tx:
            return tx.session_id

    def source_seen(self, key: str) -> tuple[int, int] | None:
        """(session id, event number) where import source ``key`` went, or None."""
        with self._errors(), self.engine.connect() as conn:
            row = conn.exec_driver_sql(self._q["get_source"], (key,)).first()
        return (row[0], row[1]) if row else None

    # -- reading ------------------------------------------------------------------------
    @contextmanager
    def _orm(self) -> Iterator[OrmSession]:
        with self._errors(), OrmSession(self.engine) as s:
            yield s

    def sessions(self) -> list[SessionRow]:
        with self._orm() as s:
            return list(s.exec(select(SessionRow).order_by(col(SessionRow.id))))

    def session_by_name(self, name: str) -> SessionRow | None:
        with self._orm() as s:
            return s.exec(select(SessionRow).where(SessionRow.name == name)).first()

    def session_by_id(self, sid: int) -> SessionRow | None:
        with self._orm() as s:
            return s.get(SessionRow, sid)

    def session_counts(self) -> dict[int, dict[str, int]]:
        """Per session: todos per status, and the number of events."""
        out: dict[int, dict[str, int]] = {}
        with self._orm() as s:
            for sid, status, count in s.exec(
                    select(TodoRow.session_id, TodoRow.status, func.count())
                    .group_by(TodoRow.session_id, TodoRow.status)):
                out.setdefault(sid, {})[status] = count
            for sid, count in s.exec(select(EventRow.session_id, func.count())
                                     .group_by(EventRow.session_id)):
                out.setdefault(sid, {})["events"] = count
        return out

    def todos(self, session_id: int) -> list[TodoState]:
        with self._orm() as s:
            rows = s.exec(select(TodoRow).where(TodoRow.session_id == session_id))
            return [_todo_from_model(r) for r in rows]

    def todo(self, session_id: int, num: int) -> TodoState:
        with self._orm() as s:
            row = s.get(TodoRow, (session_id, num))
            sess = s.get(SessionRow, session_id) if row is None else None
        if row is None:
            raise NotFound(f"unknown todo t{num}",
                           where=f"session {sess.name if sess else session_id}")
        return _todo_from_model(row)

    def events(self, session_id: int | None = None, *, todo_id: int | None = None,
               after_n: int = 0, upto_n: int | None = None, kinds: Sequence[str] = (),
               limit: int | None = None, ref: str | None = None) -> list[Event]:
        with self._orm() as s:
            q = select(EventRow)
            if session_id is not None:
                q = q.where(EventRow.session_id == session_id)
            if todo_id is not None:
                q = q.where(EventRow.todo_id == todo_id)
            if after_n:
                q = q.where(EventRow.n > after_n)
            if upto_n is not None:
                q = q.where(EventRow.n <= upto_n)
            if kinds:
                q = q.where(col(EventRow.kind).in_(list(kinds)))
            if ref is not None:
                q = q.where(EventRow.ref == ref)
            q = q.order_by(col(EventRow.seq))
            if limit is not None:
                q = q.limit(limit)
            return [_event_from_model(r) for r in s.exec(q)]

    def last_n(self, session_id: int) -> int:
        with self._orm() as s:
            return s.exec(select(func.coalesce(func.max(EventRow.n), 0))
                          .where(EventRow.session_id == session_id)).one()

    def n_at_time(self, session_id: int, ts: str) -> int:
        """The last event number at or before time ``ts``; 0 if the session was empty then."""
        with self._orm() as s:
            return s.exec(select(func.coalesce(func.max(EventRow.n), 0))
                          .where(EventRow.session_id == session_id, EventRow.ts <= ts)).one()

    @contextmanager
    def _reader(self) -> Iterator[Any]:
        """A DB-API cursor on a pooled connection, for the read paths where the ORM's
        per-row cost would dominate (replay folds thousands of events)."""
        with self._errors():
            raw = self.engine.raw_connection()
            try:
                yield raw.cursor()
            finally:
                raw.close()

    def state_at(self, session_id: int, n: int | None = None) -> SessionState:
        """The session as it was just after event ``n`` (default: now).

        Seeks the nearest snapshot at or before ``n`` and folds forward from there (at
        most ``SNAPSHOT_EVERY - 1`` events).
        """
        q = self._q
        with self._reader() as cur:
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
                apply(state, _event_from_row(r))
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
            with self._reader() as cur:
                cur.execute(self._q["events_between"], (session_id, last, hi))
                rows = cur.fetchall()
            for r in rows:
                yield _event_from_row(r)
            last = hi

    def _rows(self, model: Any, convert: Callable[[Any], T], **equal: Any) -> list[T]:
        """Rows of a projection table with the given columns equal (None: any), by id."""
        with self._orm() as s:
            q = select(model)
            for name, value in equal.items():
                if value is not None:
                    q = q.where(getattr(model, name) == value)
            return [convert(r) for r in s.exec(q.order_by(col(model.id)))]

    def runs(self, session_id: int | None = None, *, todo_id: int | None = None) -> list[RunState]:
        return self._rows(RunRow, _run_from_model, session_id=session_id, todo_id=todo_id)

    def run(self, run_id: int) -> tuple[int, RunState]:
        """(session id, run) for a store-wide run id."""
        with self._orm() as s:
            row = s.get(RunRow, run_id)
        if row is None:
            raise NotFound(f"unknown run r{run_id}")
        return row.session_id, _run_from_model(row)

    def log(self, run_id: int, offset: int = 0) -> tuple[str, int]:
        """The run's stored log from byte ``offset``: (text, offset to ask for next)."""
        with self._orm() as s:
            rows = list(s.exec(select(RunLogRow).where(RunLogRow.run_id == run_id,
                                                       RunLogRow.start >= offset)
                               .order_by(col(RunLogRow.start))))
            if offset:
                # The chunk straddling ``offset`` (stored logs are chunked as they arrived).
                prev = s.exec(select(RunLogRow).where(RunLogRow.run_id == run_id,
                                                      RunLogRow.start < offset)
                              .order_by(col(RunLogRow.start).desc()).limit(1)).first()
                if prev is not None:
                    raw = prev.data.encode()
                    skip = offset - prev.start
                    if skip < len(raw):
                        rows.insert(0, RunLogRow(run_id=run_id, start=offset,
                                                 data=raw[skip:].decode(errors="replace")))
        data = "".join(r.data for r in rows)
        end = rows[-1].start + len(rows[-1].data.encode()) if rows else offset
        return data, end

    def pipeline_spec(self, session_id: int) -> str | None:
        """The spec file the session's pipeline was last run from, if any."""
        with self._errors(), self.engine.connect() as conn:
            return conn.execute(text("SELECT value FROM meta WHERE key = :k"),
                                {"k": f"pipeline_spec:{session_id}"}).scalar()

    def log_end(self, run_id: int) -> int:
        """The byte offset just past the run's stored log (0 if none): where a tail starts."""
        with self._orm() as s:
            last = s.exec(select(RunLogRow).where(RunLogRow.run_id == run_id)
                          .order_by(col(RunLogRow.start).desc()).limit(1)).first()
        return last.start + len(last.data.encode()) if last is not None else 0

    def verifications(self, session_id: int | None = None, *,
                      todo_id: int | None = None) -> list[VerificationState]:
        return self._rows(VerificationRow, _verification_from_model, session_id=session_id,
                          todo_id=todo_id)

    def artifacts(self, session_id: int | None = None, *,
                  run_id: int | None = None) -> list[ArtifactState]:
        return self._rows(ArtifactRow, _artifact_from_model, session_id=session_id,
                          run_id=run_id)

    def agent_view(self, session_id: int, actor: str) -> Any:
        with self._errors(), self.engine.connect() as conn:
            raw = conn.execute(text("SELECT view FROM agent_views WHERE session_id = :s AND "
                                    "actor = :a"), {"s": session_id, "a": actor}).scalar()
        return json.loads(raw) if raw else None

    def agent_views(self, session_id: int) -> list[tuple[str, str, str]]:
        """(actor, view JSON text, updated_at) for every agent view of the session."""
        with self._errors(), self.engine.connect() as conn:
            rows = conn.execute(text("SELECT actor, view, updated_at FROM agent_views WHERE "
                                     "session_id = :s ORDER BY actor"), {"s": session_id})
            return [(r[0], r[1], r[2]) for r in rows]

    def _full_extras(self, cur: Any, session_id: int) -> tuple[list[VerificationState],
                                                             list[ArtifactState]]:
        cur.execute(paramstyle_sql(
            "SELECT id, todo_id, run_id, kind, artifact, sha256, passed, verdict, checks, "
            "metrics, gate, created_at FROM verifications WHERE session_id = ?", self.dialect),
            (session_id,))
        verifs = [VerificationState(id=r[0], todo_id=r[1], run_id=r[2], kind=r[3], artifact=r[4],
                                    sha256=r[5], passed=bool(r[6]), verdict=r[7],
                                    checks=json.loads(r[8]), metrics=json.loads(r[9]),
                                    gate=json.loads(r[10]), created_at=r[11])
                  for r in cur.fetchall()]
        cur.execute(paramstyle_sql(
            "SELECT id, run_id, todo_id, path, sha256, size, kind, created_at FROM artifacts "
            "WHERE session_id = ?", self.dialect), (session_id,))
        arts = [ArtifactState(id=r[0], run_id=r[1], todo_id=r[2], path=r[3], sha256=r[4],
                              size=r[5], kind=r[6], created_at=r[7]) for r in cur.fetchall()]
        return verifs, arts

    # -- change detection ------------------------------------------------------------------
    def watch(self) -> Watch:
        """A :class:`state.watch.Watch` on its own connection: ``changed()`` says whether
        anything was committed since it was last asked (LISTEN/NOTIFY on PostgreSQL,
        ``PRAGMA data_version`` on SQLite). Close it when done."""
        return Watch(self.engine)

    def change_token(self, conn: Any) -> Any:
        """A value that moves when another connection commits, read on ``conn``.

        SQLite: ``PRAGMA data_version``. PostgreSQL: the highest event sequence number (an
        index seek; it does not see run-log appends, which write no event). Prefer
        :meth:`watch`, which sees every write and needs no query on PostgreSQL. End
        ``conn``'s transaction after each call: an open one pins SQLite's snapshot.
        """
        if is_sqlite(self.url):
            return conn.exec_driver_sql("PRAGMA data_version").scalar()
        return conn.exec_driver_sql("SELECT COALESCE(MAX(seq), 0) FROM events").scalar()

    def projection_state(self, session_id: int) -> SessionState:
        """The stored projection as a SessionState (for rebuild comparisons)."""
        st = SessionState(session_id=session_id)
        st.todos = {t.num: t for t in self.todos(session_id)}
        st.runs = {r.id: r for r in self.runs(session_id)}
        st.verifications = {v.id: v for v in self.verifications(session_id)}
        st.artifacts = {a.id: a for a in self.artifacts(session_id)}
        st.n = self.last_n(session_id)
        with self._orm() as s:
            top = s.exec(select(func.coalesce(func.max(EventRow.todo_id), 0))
                         .where(EventRow.session_id == session_id)).one()
        st.next_num = max(top, max(st.todos, default=0)) + 1
        return st


def _todo_from_model(r: TodoRow) -> TodoState:
    return TodoState(num=r.num, content=r.content, active_form=r.active_form, status=r.status,
                     priority=r.priority, position=r.position, stage=r.stage,
                     depends_on=json.loads(r.depends_on), blocked_reason=r.blocked_reason,
                     origin=r.origin, created_at=r.created_at, updated_at=r.updated_at)


def _event_from_row(r: Sequence[Any]) -> Event:
    return Event(seq=r[0], session_id=r[1], n=r[2], ts=r[3], actor=r[4], kind=r[5],
                 todo_id=r[6], payload=json.loads(r[7]), ref=r[8])


def _event_from_model(r: EventRow) -> Event:
    return Event(seq=r.seq, session_id=r.session_id, n=r.n, ts=r.ts, actor=r.actor, kind=r.kind,
                 todo_id=r.todo_id, payload=json.loads(r.payload), ref=r.ref)


def _run_from_model(r: RunRow) -> RunState:
    data = {c: getattr(r, c) for c in _RUN_COLS}
    for name in _RUN_JSON:
        data[name] = json.loads(data[name]) if data[name] else None
    return RunState(**data)


def _verification_from_model(r: VerificationRow) -> VerificationState:
    return VerificationState(id=r.id, todo_id=r.todo_id, run_id=r.run_id, kind=r.kind,
                             artifact=r.artifact, sha256=r.sha256, passed=bool(r.passed),
                             verdict=r.verdict, checks=json.loads(r.checks),
                             metrics=json.loads(r.metrics), gate=json.loads(r.gate),
                             created_at=r.created_at)


def _artifact_from_model(r: ArtifactRow) -> ArtifactState:
    return ArtifactState(id=r.id, run_id=r.run_id, todo_id=r.todo_id, path=r.path,
                         sha256=r.sha256, size=r.size, kind=r.kind, created_at=r.created_at)


__all__ = ["SNAPSHOT_EVERY", "Store", "Tx", "normalize_ts", "utcnow"]
