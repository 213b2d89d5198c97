"""``harness next`` and the MCP tool ``claim_next``: the todo to work on now, and claiming it.

Ready means pending, with every dependency completed, and not bound to a pipeline stage
(the runner starts those: ``harness run``, or the ``run_stage`` tool). The highest
priority comes first, then the board's order.

A claim is atomic. The choice and the change to ``in_progress`` happen in one write
transaction, which holds the store's write lock from its first statement (``BEGIN
IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL) and reads the list under it. So two
agents asking at once never get the same todo: the second one reads the list the first
one left. (beads' ``bd ready --claim`` read, then wrote: two agents opened near-identical
PRs, beads #3570.) The claim's event is by the claiming actor, so ``harness log`` shows
who holds what.

A claim may have a lease (``--lease 15m``, ``claim_next(lease=...)``, else the session's
``claim-lease``): it then ends, the todo back to pending, once its holder has given no
sign of life for that long (:mod:`harness.agents.leases`, :mod:`state.leases`). The
claim's transaction first ends whatever ran out, so a todo whose lease just ran out is
the next claimer's, and only one claimer's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from harness.agents.leases import session_lease
from harness.render import duration_text, iso_time, safe_line
from state.fold import PRIORITY_RANK, TodoState, unmet_dependencies
from state.leases import NO_LEASE, iso
from state.store import Store

HUMAN = "human"


@dataclass(frozen=True)
class NextTodo:
    todo: TodoState | None  # None: nothing is ready
    claimed: bool
    waiting: int  # pending, but waiting on a dependency
    in_progress: int
    blocked: int
    lease_expires_at: float | None = None  # the claim's lease runs out then, unless renewed


def ready(todos: dict[int, TodoState]) -> list[TodoState]:
    """The ready todos, best first."""
    found = [t for t in todos.values() if t.status == "pending" and t.stage is None
             and not unmet_dependencies(t, todos)]
    return sorted(found, key=lambda t: (PRIORITY_RANK.get(t.priority, 1), t.position, t.num))


def next_ready(store: Store, session_id: int, *, claim: bool = False,
               actor: str | None = None, lease: float | None = None) -> NextTodo:
    """The best ready todo; with ``claim``, marked in progress by ``actor`` in the same
    transaction that chose it, for ``lease`` seconds without a sign of life (None: the
    session's default; :data:`NO_LEASE`: forever)."""
    who = claim_actor(actor)
    if not claim:
        store.expire_lapsed(session_id)  # a todo whose lease ran out is ready again
        todos = {t.num: t for t in store.todos(session_id)}
        return _answer(todos, next(iter(ready(todos)), None), claimed=False)
    from harness.todos import _patch_view

    with store.write(session_id, who) as tx:
        todos = tx.state.todos
        best = next(iter(ready(todos)), None)
        if best is None:
            return _answer(dict(todos), None, claimed=False)
        seen_n = tx.state.n
        seconds = session_lease(tx) if lease is None else lease
        changes: dict[str, object] = {"status": "in_progress", "claimed_by": who}
        if seconds != NO_LEASE:
            changes["lease_s"] = seconds
        tx.update_todo(best.num, **changes)
        if who.startswith("agent:"):
            _patch_view(tx, who, tx.todo(best.num), seen_n)
        found = _answer(dict(tx.state.todos), tx.todo(best.num), claimed=True)
        if seconds != NO_LEASE:
            found = replace(found, lease_expires_at=tx.now + seconds)
        return found


def claim_actor(name: str | None) -> str:
    """``--actor w1`` -> ``agent:w1``; none -> ``human``."""
    if not name or not name.strip():
        return HUMAN
    name = " ".join(name.split())
    return name if name.startswith("agent:") or name == HUMAN else f"agent:{name}"




def _answer(todos: dict[int, TodoState], todo: TodoState | None, *, claimed: bool) -> NextTodo:
    pending = [t for t in todos.values() if t.status == "pending"]
    return NextTodo(todo=todo, claimed=claimed,
                    waiting=sum(bool(unmet_dependencies(t, todos)) for t in pending),
                    in_progress=sum(t.status == "in_progress" for t in todos.values()),
                    blocked=sum(t.status == "blocked" for t in todos.values()))


def render_next(found: NextTodo, session_name: str, *, claimed: bool) -> tuple[str, dict[str, Any]]:
    """(the line a person or a model reads, the JSON answer)."""
    data: dict[str, Any] = {"session": session_name, "claimed": found.claimed,
                            "todo": None, "waiting_on_dependencies": found.waiting,
                            "in_progress": found.in_progress, "blocked": found.blocked}
    if found.todo is None:
        why = []
        if found.waiting:
            why.append(f"{found.waiting} waiting on dependencies")
        if found.in_progress:
            why.append(f"{found.in_progress} in progress")
        if found.blocked:
            why.append(f"{found.blocked} blocked")
        text = "nothing is ready" + (f" ({', '.join(why)})" if why else "")
        data["reason"] = text
        return text, data
    t = found.todo
    data["todo"] = {"id": t.id, "content": t.content, "status": t.status,
                    "priority": t.priority, "depends_on": [f"t{d}" for d in t.depends_on]}
    verb = "claimed" if found.claimed else "next"
    text = f"{verb} {t.id} ({t.priority}) {safe_line(t.content, 100)}"
    if found.claimed:
        data["todo"]["claimed_by"] = t.claimed_by
        data["todo"]["lease_s"] = t.lease_s
        data["todo"]["lease_expires_at"] = (iso(found.lease_expires_at)
                                            if found.lease_expires_at is not None else None)
        if found.lease_expires_at is not None and t.lease_s is not None:
            text += (f" (lease {duration_text(t.lease_s)}, until "
                     f"{iso_time(found.lease_expires_at)} UTC; each of your calls, or "
                     "`harness heartbeat`, renews it)")
    return text, data
