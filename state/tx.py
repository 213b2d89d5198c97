"""The write transaction: :class:`Tx`, made by :meth:`state.store.Store.write`.

A Tx holds the store's write lock from its first statement (``BEGIN IMMEDIATE`` on
SQLite, an advisory transaction lock on PostgreSQL), loads the session's current state
from the projection, lets the caller emit events (each folded into that state at once by
:func:`state.fold.apply`), and on exit writes the events, the projection rows they
touched, a snapshot when one is due, and commits, all in one transaction.

It uses the DB-API connection directly: the ORM's unit of work costs ~20x a raw write
(docs/PERFORMANCE.md), and an agent's todo write is the hot path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, Protocol

from state.db.sql import (
    MULTI_ROW_MAX,
    artifact_values,
    event_from_row,
    multi_row_insert,
    run_from_row,
    run_values,
    todo_from_row,
    todo_values,
    verification_values,
)
from state.errors import InvalidChange, NotFound
from state.fold import (
    RUN_MUTABLE,
    TODO_MUTABLE,
    ArtifactState,
    Event,
    RunState,
    SessionState,
    TodoState,
    VerificationState,
    apply,
    check_priority,
    check_status,
    claim_of,
)
from state.leases import LEASE_ACTOR, expire_lapsed, expired_lease
from state.series import SeriesPoint, point_values
from state.values import dumps, nul_at, utcnow


class TxStore(Protocol):
    """What a transaction uses of the store that opened it (:class:`state.store.Store`).

    A protocol, not the class, because the store imports this module to make its Tx.
    """

    dialect: str
    _q: dict[str, str]
    _notify: str | None
    _todo_cache: dict[int, tuple[int, dict[int, TodoState]]]
    _leases_seen: dict[tuple[int, str], float]

    def _sql(self, sql: str) -> str: ...

    def _full_extras(self, cur: Any, session_id: int
                     ) -> tuple[list[VerificationState], list[ArtifactState]]: ...

    def state_at(self, session_id: int, n: int | None = None) -> SessionState: ...

# The events that take a fresh store-wide id: the table it counts in, the payload's field.
_NEW_IDS = {"run.queued": ("runs", "run"),
            "verification.recorded": ("verifications", "verification"),
            "artifact.recorded": ("artifacts", "artifact")}

# Snapshot a session's state every this many events (chosen by bench/store/replay.py).
SNAPSHOT_EVERY = 256


class Tx:
    """One write transaction on one session. Create with :meth:`Store.write`."""

    def __init__(self, store: TxStore, cur: Any, session_id: int, actor: str, ref: str | None,
                 *, heartbeat: bool = True, key: str | None = None, check: bool = False):
        self.store = store
        #: this write's client-made key (state/retry.py), stored on its first event
        self.key = key
        #: the events a commit of this very write left, when a retry finds its key stored:
        #: the body then replays against the session as it was before them, writing nothing
        self.landed: list[Event] | None = None
        self._replay_ids: dict[str, list[int]] = {}
        self._replayed = 0  # landed events matched by the replay so far
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
        self._points: list[tuple[Any, ...]] = []
        self._existing_todos: set[int] = set()
        self._existing_runs: set[int] = set()
        self._snapshots: list[tuple[int, int, int, str]] = []
        self._sources: list[tuple[str, int, int, str]] = []
        self._source_keys: set[str] = set()
        self.emitted = 0
        self._wrote = False  # a write that is not an event (agent view, session pipeline)
        self._view_writes: dict[str, tuple[str, str]] = {}
        # Leases (state/leases.py): the store's clock as of the lock, what this
        # transaction's events did to leased claims (todo -> new claim, or None: ended),
        # and the leases that ran out and were ended here.
        self.now = 0.0
        self._heartbeat = heartbeat
        self._lease_changes: dict[int, tuple[str, float, str] | None] = {}
        self.expired: list[Event] = []
        self._load(check)

    # -- loading -------------------------------------------------------------------------
    def _one(self, name: str, *args: Any) -> Any:
        self._cur.execute(self._q[name], args)
        row = self._cur.fetchone()
        return row[0] if row else None

    def _load(self, check: bool) -> None:
        sid = self.session_id
        self._cur.execute(self._q["load_tops"], (sid, sid, sid, self.actor, sid, sid,
                                                 self.actor))
        seq, n, top, self._views[self.actor], now, earliest, due = self._cur.fetchone()
        self.now = float(now)
        self._seq = seq or 0
        n = n or 0
        cached = self.store._todo_cache.pop(sid, None)
        if cached is not None and cached[0] == n:
            # Nobody wrote to this session since our own last commit: the projection is
            # what we left. (n moves with every event of the session, from any writer.)
            todos = cached[1]
        else:
            self._cur.execute(self._q["load_todos"], (sid,))
            todos = {row[0]: todo_from_row(row) for row in self._cur.fetchall()}
        next_num = max(top or 0, max(todos, default=0)) + 1
        self.state = SessionState(session_id=sid, n=n, next_num=next_num, todos=todos)
        self._start_n = n
        self._existing_todos = set(todos)
        if check and self.key is not None and self._find_landed(self.key):
            return
        if earliest is not None and earliest <= self.now:
            self.expired = expire_lapsed(self)
        if not self._heartbeat:
            return
        if due:
            # Any write by the holder is a sign of life: its leases (those that have not
            # run out, just ended above) start again from now; those renewed less than a
            # tenth of their length ago are left as they are (no write for so little).
            self.renew_leases()
        self.store._leases_seen[(sid, self.actor)] = time.monotonic()

    def _find_landed(self, key: str) -> bool:
        """A retried write: if a commit of it landed (its acknowledgement lost on the
        way), take the session back to just before it, so the body computes what it
        computed then; :meth:`write_out` then writes nothing. Whether it had landed."""
        from state.errors import StoreUnreachable

        self._cur.execute(self._q["write_landed"], (key,))
        row = self._cur.fetchone()
        if row is None:
            return False
        if row[0] != self.session_id:
            raise StoreUnreachable("a retried write's key belongs to another write",
                                   diverged=key)
        first = row[1]
        self._cur.execute(self._q["events_from"], (self.session_id, first))
        landed: list[Event] = []
        for r in self._cur:
            if landed and r[9] is not None:
                break  # the next write's first event
            landed.append(event_from_row(r))
        state = self.store.state_at(self.session_id, first - 1)
        # The leases the first attempt found run out were ended at its start: end them
        # again here, the same way, and replay the rest.
        self.expired = []
        for ev in landed:
            if ev.actor != LEASE_ACTOR or expired_lease(ev) is None:
                break
            apply(state, ev)
            self.expired.append(ev)
        self.landed = landed[len(self.expired):]
        self.state = state
        self._seq = self.expired[-1].seq if self.expired else landed[0].seq - 1
        self._start_n = state.n
        self._existing_todos = set(state.todos)
        self._existing_runs = set(state.runs)
        self._runs_loaded = True
        for ev in self.landed:
            if ev.kind in _NEW_IDS:
                table, name = _NEW_IDS[ev.kind]
                self._replay_ids.setdefault(table, []).append(ev.payload[name])
        return True

    def renew_leases(self) -> None:
        """Renew every lease of this transaction's actor in its session that has not run
        out: each runs again from ``now`` (no event)."""
        self._cur.execute(self._q["renew_leases_at"],
                          (self.now, self.now, self.session_id, self.actor, self.now))

    def fetch_one(self, sql: str, *args: Any) -> Any:
        """One row of a query (``?`` placeholders) inside this transaction, or None."""
        self._cur.execute(self.store._sql(sql), args)
        return self._cur.fetchone()

    def fetch_all(self, sql: str, *args: Any) -> list[Any]:
        """Every row of a query (``?`` placeholders) inside this transaction."""
        self._cur.execute(self.store._sql(sql), args)
        return list(self._cur.fetchall())

    def load_runs(self) -> dict[int, RunState]:
        """The session's runs (loaded once per transaction, on first use)."""
        if self._runs_loaded:
            return self.state.runs
        self._cur.execute(self._q["load_runs"], (self.session_id,))
        for row in self._cur.fetchall():
            run = run_from_row(row)
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
        before = self.state.todos.get(todo_id) if todo_id is not None else None
        for key in apply(self.state, ev):
            self._touched[key] = None
        if todo_id is not None and kind.startswith("todo."):
            after = self.state.todos.get(todo_id)
            claim = claim_of(after) if after is not None else None
            if claim != (claim_of(before) if before is not None else None):
                self.lease_changed(todo_id, claim)
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
        if self.landed is not None:  # a replay: the ids the landed commit took, in order
            ids = self._replay_ids.get(table)
            if not ids:
                self._diverged()
            return ids.pop(0)  # type: ignore[union-attr]
        if table not in self._new_ids:
            self._new_ids[table] = self._one(f"max_id_{table}") or 0
        self._new_ids[table] += 1
        return self._new_ids[table]

    def lease_changed(self, num: int, claim: tuple[str, float, str] | None) -> None:
        """Todo ``num`` gained the leased ``claim`` (holder, seconds, claimed at), or lost
        its lease (None): its ``leases`` row is written or removed with the events."""
        self._lease_changes[num] = claim

    # -- todo primitives: validated, and silent when nothing changes ----------------------
    def create_todo(self, content: str, *, status: str = "pending", priority: str = "medium",
                    position: float | None = None, active_form: str | None = None,
                    stage: str | None = None, depends_on: Sequence[int] = (),
                    blocked_reason: str | None = None, origin: str = "human",
                    num: int | None = None, ts: str | None = None,
                    ref: str | None = None) -> TodoState:
        check_status(status)
        check_priority(priority)
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
                check_status(value)
            elif name == "priority":
                check_priority(value)
            elif name == "depends_on":
                value = list(value)
            if getattr(todo, name) != value:
                diff[name] = [getattr(todo, name), value]
        if (todo.claimed_by is not None and "status" in diff and diff["status"][1] != "in_progress"
                and "claimed_by" not in diff):
            # Said in the event, not only done by the fold: the history shows whose
            # claim a change of status ended.
            diff["claimed_by"] = [todo.claimed_by, None]
            if todo.lease_s is not None:
                diff["lease_s"] = [todo.lease_s, None]
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

    def append_points(self, points: Sequence[SeriesPoint]) -> None:
        """Points of a job's series (:mod:`state.series`): data like its log, no event.
        Written at flush; a point already stored (same run and line) is left alone."""
        self._points.extend(point_values(p) for p in points)

    def set_session_pipeline(self, pipeline: str, spec_path: str | None = None) -> None:
        """Name the session's pipeline (and remember its spec file, for `run_stage`)."""
        self._wrote = True
        self._cur.execute(self._q["update_session_pipeline"], (pipeline, self.session_id))
        if spec_path is not None:
            self._cur.execute(self._q["upsert_meta"],
                              (f"pipeline_spec:{self.session_id}", spec_path))

    def set_meta(self, key: str, value: str) -> None:
        """A store setting that is not history (a session's default claim lease)."""
        self._wrote = True
        self._cur.execute(self._q["upsert_meta"], (key, value))

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
    def write_out(self) -> None:
        """Write what the transaction did: events, projection rows, logs, agent views,
        snapshots, import sources, and (PostgreSQL) the notification for watchers.

        :meth:`Store.write <state.store.Store.write>` and ``write_new`` call this as their
        block ends, just before COMMIT: every write of a transaction goes out in one batch
        there, not statement by statement as the caller emits. (:meth:`flush` is this
        mid-transaction, then a fresh batch.)

        (psycopg's pipeline mode was tried for these writes: slower here, its sync costs
        more than the ~30 µs round trips it saves on a local server.)
        """
        self._write(final=True)

    def _write(self, *, final: bool) -> None:
        if self.landed is not None:
            # A replay of a write whose commit had landed: it must do the same again.
            done = self._replayed + len(self.events)
            if [(e.kind, e.todo_id) for e in self.events] != \
                    [(e.kind, e.todo_id) for e in self.landed[self._replayed:done]] \
                    or (final and done != len(self.landed)):
                self._diverged()
            self._replayed = done
            return
        q, cur = self._q, self._cur
        if self.events:
            self._flush_events()
        if self._logs:
            cur.executemany(q["insert_log"], self._logs)
        if self._points:
            cur.executemany(q["insert_point"], self._points)
        for actor, (text_, ts) in self._view_writes.items():
            cur.execute(q["upsert_view"], (self.session_id, actor, text_, ts))
        if self._snapshots:
            cur.executemany(q["insert_snapshot"], self._snapshots)
        if self._sources:
            cur.executemany(q["insert_source"], self._sources)
        for num, claim in self._lease_changes.items():
            if claim is None:
                cur.execute(q["delete_lease"], (self.session_id, num))
            else:
                cur.execute(q["upsert_lease"], (self.session_id, num, claim[0], claim[1],
                                                self.now, self.now + claim[1]))
        notify = self.store._notify
        if notify and (self.events or self._logs or self._points or self._wrote):
            cur.execute(notify, (str(self._seq),))

    def flush(self) -> None:
        """Write everything emitted so far and keep the transaction open.

        A long import calls this now and then so that its memory stays bounded; the
        transaction still commits or rolls back as a whole.
        """
        self._write(final=False)
        self.events = []
        self._payloads = []
        self._touched = {}
        self._logs = []
        self._points = []
        self._snapshots = []
        self._sources = []
        self._view_writes = {}
        self._lease_changes = {}

    def _diverged(self) -> None:
        """The stored write under this key is another one (the operation took another
        path this time): run it again with a fresh key."""
        from state.errors import StoreUnreachable

        raise StoreUnreachable("a retried write's key belongs to another write",
                               diverged=self.key)

    def _flush_events(self) -> None:
        q, cur, sid = self._q, self._cur, self.session_id
        rows = [(e.seq, e.session_id, e.n, e.ts, e.actor, e.kind, e.todo_id, text_, e.ref,
                 None) for e, text_ in zip(self.events, self._payloads, strict=True)]
        if self.key is not None:
            rows[0] = (*rows[0][:9], self.key)
            self.key = None  # on the first event of the transaction only (flush() again)
        if self.store.dialect == "postgresql" and len(rows) <= MULTI_ROW_MAX:
            # One multi-row INSERT: psycopg's executemany syncs a pipeline, which costs
            # more than the statement for the few events of an everyday write.
            cur.execute(multi_row_insert(q["insert_event"], len(rows)),
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
                    cur.execute(q["update_todo"], [*todo_values(t)[1:], sid, key])
                else:
                    cur.execute(q["insert_todo"], [sid, *todo_values(t)])
                    self._existing_todos.add(key)
            elif kind == "todo-":
                if key in self._existing_todos:
                    cur.execute(q["delete_todo"], (sid, key))
                    self._existing_todos.discard(key)
            elif kind == "run":
                r = st.runs[key]
                if key in self._existing_runs:
                    cur.execute(q["update_run"], [*run_values(r)[1:], key])
                else:
                    cur.execute(q["insert_run"], [sid, *run_values(r)])
                    self._existing_runs.add(key)
            elif kind == "verification":
                v = st.verifications[key]
                cur.execute(q["insert_verification"], verification_values(v, sid))
            elif kind == "artifact":
                a = st.artifacts[key]
                cur.execute(q["insert_artifact"], artifact_values(a, sid))

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

