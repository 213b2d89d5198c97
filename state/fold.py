"""The one fold: how an event changes a session's state.

The live projection, replay, snapshots and ``harness rebuild`` all go through
:func:`apply`, so they cannot disagree. The store writes the projection rows for whatever
:func:`apply` reports as touched, in the same transaction as the events.

State here is plain dataclasses and JSON-able values: no SQL, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from state.errors import InvalidChange

STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "blocked", "cancelled")
PRIORITIES: tuple[str, ...] = ("high", "medium", "low")
PRIORITY_RANK: dict[str, int] = {"high": 0, "medium": 1, "low": 2}
STATUS_GROUP: dict[str, int] = {
    "in_progress": 0, "pending": 1, "blocked": 2, "completed": 3, "cancelled": 4,
}
ORIGINS: tuple[str, ...] = ("human", "agent", "pipeline", "import")
RUN_STATES: tuple[str, ...] = ("queued", "running", "succeeded", "failed", "cancelled", "lost")
RUN_FINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "lost"})


def check_status(status: str) -> None:
    """A status a todo may have, or InvalidChange naming the ones it may."""
    if status not in STATUSES:
        raise InvalidChange(f"unknown status {status!r} (expected one of {', '.join(STATUSES)})")


def check_priority(priority: str) -> None:
    """A priority a todo may have, or InvalidChange naming the ones it may."""
    if priority not in PRIORITIES:
        raise InvalidChange(
            f"unknown priority {priority!r} (expected one of {', '.join(PRIORITIES)})")


@dataclass
class TodoState:
    num: int
    content: str
    status: str = "pending"
    priority: str = "medium"
    position: float = 0.0
    active_form: str | None = None
    stage: str | None = None
    depends_on: list[int] = field(default_factory=list)
    blocked_reason: str | None = None
    origin: str = "human"
    created_at: str = ""
    updated_at: str = ""
    # Who claimed it (`harness next --claim`, `claim_next`) while it is in progress, since
    # when (the claim event's time), and the claim's lease in seconds (None: it never
    # expires). Its live expiry moves with heartbeats, which are not events: the store's
    # `leases` table holds it (state/leases.py).
    claimed_by: str | None = None
    claimed_at: str | None = None
    lease_s: float | None = None

    @property
    def id(self) -> str:
        return f"t{self.num}"


# Fields a `todo.updated` event may change. `num`, `origin`, `created_at` and
# `claimed_at` (the time of the event that sets `claimed_by`) are never changed directly.
TODO_MUTABLE: tuple[str, ...] = (
    "content", "status", "priority", "position", "active_form", "stage", "depends_on",
    "blocked_reason", "claimed_by", "lease_s",
)
# The claim's fields, left out of a snapshot's todo while it has no claim: snapshots
# written before claims had them stay equal to the fold (harness rebuild --check).
CLAIM_FIELDS: tuple[str, ...] = ("claimed_by", "claimed_at", "lease_s")
# The payload key of a `todo.updated` that a lease running out made (state/leases.py).
LEASE_EXPIRED = "lease_expired"


@dataclass
class RunState:
    id: int
    todo_id: int | None = None
    stage: str | None = None
    host: str = "local"
    state: str = "queued"
    attempt: int = 1
    command: str | None = None
    run_dir: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    reason: str | None = None
    code_hash: str | None = None
    queued_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    result: dict[str, Any] | None = None
    # How to find the job again from any process: its key on the host and the host entry.
    job: dict[str, Any] | None = None
    # Which runner watches it ("hostname:pid"), so a second runner keeps its hands off.
    owner: str | None = None


RUN_MUTABLE: tuple[str, ...] = tuple(
    f.name for f in fields(RunState) if f.name not in ("id", "queued_at")
)


@dataclass
class VerificationState:
    id: int
    todo_id: int | None = None
    run_id: int | None = None
    kind: str = "checkpoint"
    artifact: str | None = None
    sha256: str | None = None
    passed: bool = False
    verdict: str = ""
    checks: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""


@dataclass
class ArtifactState:
    id: int
    run_id: int | None = None
    todo_id: int | None = None
    path: str = ""
    sha256: str | None = None
    size: int | None = None
    kind: str = "file"
    created_at: str = ""


@dataclass
class Event:
    """One row of the append-only log. ``n`` numbers events within a session from 1."""

    seq: int
    session_id: int
    n: int
    ts: str
    actor: str
    kind: str
    todo_id: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    ref: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SessionState:
    session_id: int
    n: int = 0
    next_num: int = 1
    todos: dict[int, TodoState] = field(default_factory=dict)
    runs: dict[int, RunState] = field(default_factory=dict)
    verifications: dict[int, VerificationState] = field(default_factory=dict)
    artifacts: dict[int, ArtifactState] = field(default_factory=dict)

    def ordered(self) -> list[TodoState]:
        """The board order: status group, then priority, then position."""
        return sorted(self.todos.values(), key=board_key)

    def by_position(self) -> list[TodoState]:
        return sorted(self.todos.values(), key=lambda t: (t.position, t.num))

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "n": self.n,
            "next_num": self.next_num,
            "todos": [_todo_json(t) for t in self.by_position()],
            "runs": [asdict(r) for r in sorted(self.runs.values(), key=lambda r: r.id)],
            "verifications": [asdict(v) for v in
                              sorted(self.verifications.values(), key=lambda v: v.id)],
            "artifacts": [asdict(a) for a in sorted(self.artifacts.values(), key=lambda a: a.id)],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionState:
        st = cls(session_id=data["session_id"], n=data["n"], next_num=data["next_num"])
        st.todos = {t["num"]: TodoState(**t) for t in data.get("todos", [])}
        st.runs = {r["id"]: RunState(**r) for r in data.get("runs", [])}
        st.verifications = {v["id"]: VerificationState(**v) for v in data.get("verifications", [])}
        st.artifacts = {a["id"]: ArtifactState(**a) for a in data.get("artifacts", [])}
        return st

    def copy(self) -> SessionState:
        return SessionState.from_json(json.loads(json.dumps(self.to_json())))


def _todo_json(t: TodoState) -> dict[str, Any]:
    data = asdict(t)
    if t.claimed_by is None:
        for name in CLAIM_FIELDS:
            del data[name]
    return data


def claim_of(t: TodoState) -> tuple[str, float, str] | None:
    """(holder, lease seconds, claimed at) of a todo's leased claim; None without one."""
    if t.claimed_by is None or t.lease_s is None:
        return None
    return t.claimed_by, t.lease_s, t.claimed_at or ""


def board_key(t: TodoState) -> tuple[int, int, float, int]:
    return (STATUS_GROUP.get(t.status, 9), PRIORITY_RANK.get(t.priority, 9), t.position, t.num)


def unmet_dependencies(todo: TodoState, todos: dict[int, TodoState]) -> list[int]:
    """Dependencies not yet completed. Derived, never stored (as Taskwarrior derives BLOCKED).

    A dependency that no longer exists (removed by an agent) no longer holds anything up.
    """
    return [d for d in todo.depends_on if d in todos and todos[d].status != "completed"]


# What apply() reports so the store knows which projection rows to write.
Touched = tuple[str, int]


def apply(state: SessionState, ev: Event) -> list[Touched]:
    """Fold one event into ``state`` (in place) and say which rows it touched.

    Unknown kinds are ignored, so an older harness can still replay a newer log's todos.
    """
    state.n = ev.n
    kind = ev.kind
    p = ev.payload
    if kind == "todo.created":
        num = int(ev.todo_id)  # type: ignore[arg-type]
        state.todos[num] = TodoState(
            num=num,
            content=p["content"],
            status=p.get("status", "pending"),
            priority=p.get("priority", "medium"),
            position=float(p.get("position", num)),
            active_form=p.get("active_form"),
            stage=p.get("stage"),
            depends_on=list(p.get("depends_on") or []),
            blocked_reason=p.get("blocked_reason"),
            origin=p.get("origin", "human"),
            created_at=ev.ts,
            updated_at=ev.ts,
        )
        state.next_num = max(state.next_num, num + 1)
        return [("todo", num)]
    if kind == "todo.updated":
        num = int(ev.todo_id)  # type: ignore[arg-type]
        todo = state.todos.get(num)
        if todo is None:
            return []
        # Replace, never mutate: a TodoState handed out earlier stays as it was.
        changes = {name: (list(new) if name == "depends_on" else new)
                   for name, (_old, new) in p["changes"].items() if name in TODO_MUTABLE}
        if "claimed_by" in changes:
            changes["claimed_at"] = ev.ts if changes["claimed_by"] is not None else None
        new = replace(todo, updated_at=ev.ts, **changes)
        if new.claimed_by is not None and new.status != "in_progress":
            # A claim lasts while its todo is in progress: done, blocked, cancelled, back
            # to pending (a lease that ran out) all end it.
            new = replace(new, claimed_by=None, claimed_at=None, lease_s=None)
        elif new.claimed_by is None and (new.lease_s is not None or new.claimed_at):
            new = replace(new, claimed_at=None, lease_s=None)
        state.todos[num] = new
        return [("todo", num)]
    if kind == "todo.removed":
        num = int(ev.todo_id)  # type: ignore[arg-type]
        if state.todos.pop(num, None) is None:
            return []
        return [("todo-", num)]
    if kind == "todo.noted":
        num = int(ev.todo_id)  # type: ignore[arg-type]
        if num in state.todos:
            state.todos[num] = replace(state.todos[num], updated_at=ev.ts)
            return [("todo", num)]
        return []
    if kind == "run.queued":
        rid = int(p["run"])
        state.runs[rid] = RunState(
            id=rid, todo_id=ev.todo_id, queued_at=ev.ts,
            **{k: v for k, v in p.items() if k in RUN_MUTABLE},
        )
        return [("run", rid)]
    if kind == "run.updated":
        rid = int(p["run"])
        run = state.runs.get(rid)
        if run is None:
            return []
        for name, (_old, new) in p["changes"].items():
            if name in RUN_MUTABLE:
                setattr(run, name, new)
        return [("run", rid)]
    if kind == "verification.recorded":
        vid = int(p["verification"])
        state.verifications[vid] = VerificationState(
            id=vid, todo_id=ev.todo_id, created_at=ev.ts,
            **{k: v for k, v in p.items()
               if k in {f.name for f in fields(VerificationState)} - {"id", "todo_id", "created_at"}},
        )
        return [("verification", vid)]
    if kind == "artifact.recorded":
        aid = int(p["artifact"])
        state.artifacts[aid] = ArtifactState(
            id=aid, todo_id=ev.todo_id, created_at=ev.ts,
            **{k: v for k, v in p.items()
               if k in {f.name for f in fields(ArtifactState)} - {"id", "todo_id", "created_at"}},
        )
        return [("artifact", aid)]
    return []


def fold(events: Iterable[Event], state: SessionState) -> SessionState:
    for ev in events:
        apply(state, ev)
    return state


def diff_todo(old: TodoState | None, new: TodoState | None) -> dict[str, list[Any]]:
    """Field-by-field ``{name: [old, new]}`` between two versions of a todo (for display)."""
    if old is None or new is None:
        return {}
    return {name: [getattr(old, name), getattr(new, name)] for name in TODO_MUTABLE
            if getattr(old, name) != getattr(new, name)}
