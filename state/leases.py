"""Leases: how long a claim outlives the last sign of life of the agent that holds it.

A claim (``harness next --claim --lease 15m``) is an event: a ``todo.updated`` that sets
``status`` in progress, ``claimed_by`` and ``lease_s`` (:mod:`state.fold` says what it
does). Its live part is a row of ``leases`` (``heartbeat_at``, ``expires_at``, seconds
since the epoch by the store's clock, :func:`state.db.dialect.clock_sql`), which the write
transaction (:class:`state.tx.Tx`) keeps in step with the fold: written when a todo
gains a leased claim, removed when the claim ends (done, blocked, cancelled, removed, run
out). A heartbeat moves the row and writes no event: an agent's every hook and MCP call
is one, and an event each would bury the history (docs/teams.md).

Every write transaction reads the store's clock, the session's earliest expiry and the
number of leases its actor holds with the numbers it reads anyway (one round trip), after
taking the write lock. Then:

* a lease whose ``expires_at`` has passed is ended in that transaction: one
  ``todo.updated`` by :data:`LEASE_ACTOR` that puts the todo back to pending and says
  why under :data:`state.fold.LEASE_EXPIRED` (who held it, when it ran out, the last
  heartbeat, when and by whom it was noticed);
* the actor's other leases are renewed (one UPDATE), so any write by an agent is a
  heartbeat too; a lease renewed less than a tenth of its length ago is left as it is, so
  an agent that writes often does not write a renewal each time.

Because claims, renewals and expiry all run under the store's write lock, and the clock
is read after it is taken, a lease that has run out is taken by one claimer only, and a
renewed lease cannot be ended: a renewal that committed first is seen by the next
transaction's reads, and one that comes after finds the lease gone and renews nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from state.db.sql import SQL
from state.fold import LEASE_EXPIRED, Event, SessionState, TodoState, claim_of


class LeaseTx(Protocol):
    """What ending leases uses of a write transaction (:class:`state.tx.Tx`, which
    imports this module)."""

    session_id: int
    actor: str
    ref: str | None
    now: float
    state: SessionState

    def fetch_all(self, sql: str, *args: Any) -> list[Any]: ...

    def emit(self, kind: str, *, todo_id: int | None = None,
             payload: dict[str, Any] | None = None, actor: str | None = None) -> Event: ...

    def lease_changed(self, num: int, claim: tuple[str, float, str] | None) -> None: ...

    def flush(self) -> None: ...

# The lease of a claim made with `--lease none`: none, whatever the session's default.
NO_LEASE = 0.0
# The actor of the event that ends a lease that ran out: the store's own bookkeeping,
# never the agent that lost it, so the notice of what others changed tells that agent.
LEASE_ACTOR = "harness"


def iso(epoch: float) -> str:
    """Seconds since the epoch as the store's timestamp text (UTC, microseconds, Z)."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(
        timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Lease:
    """A live lease: todo ``num`` held by ``holder`` until ``expires_at`` (epoch seconds
    by the store's clock) unless renewed; ``heartbeat_at`` is its last renewal (or the
    claim)."""

    num: int
    holder: str
    lease_s: float
    heartbeat_at: float
    expires_at: float

    def left(self, now: float) -> float:
        """Seconds until it runs out (negative: it has, and nobody has noticed yet)."""
        return self.expires_at - now

    def to_json(self) -> dict[str, Any]:
        return {"holder": self.holder, "lease_s": self.lease_s,
                "last_heartbeat_at": iso(self.heartbeat_at),
                "lease_expires_at": iso(self.expires_at)}


def lease_from_row(row: Any) -> Lease:
    return Lease(num=row[0], holder=row[1], lease_s=float(row[2]),
                 heartbeat_at=float(row[3]), expires_at=float(row[4]))


def expiry_payload(todo: TodoState, lease: Lease, now: float, noticed_by: str) -> dict[str, Any]:
    """The payload of the ``todo.updated`` that ends ``lease``: back to pending, and why."""
    return {
        "changes": {"status": [todo.status, "pending"], "claimed_by": [lease.holder, None],
                    "lease_s": [todo.lease_s, None]},
        LEASE_EXPIRED: {"holder": lease.holder, "lease_s": lease.lease_s,
                        "expired_at": iso(lease.expires_at),
                        "last_heartbeat_at": iso(lease.heartbeat_at),
                        "noticed_at": iso(now), "noticed_by": noticed_by},
    }


def expire_lapsed(tx: LeaseTx) -> list[Event]:
    """End every lease of ``tx``'s session that has run out by ``tx.now``; returns the
    events. Written at once (``tx.flush``), so the rest of the transaction, and any query
    it makes, sees the todos back to pending."""
    rows = tx.fetch_all(SQL["lapsed_leases"], tx.session_id, tx.now)
    out: list[Event] = []
    ref, tx.ref = tx.ref, None  # the expiry is not part of what the caller's ref names
    try:
        for row in rows:
            lease = lease_from_row(row)
            todo = tx.state.todos.get(lease.num)
            if todo is None or claim_of(todo) is None or todo.claimed_by != lease.holder:
                tx.lease_changed(lease.num, None)  # its claim ended without its row
                continue
            out.append(tx.emit("todo.updated", todo_id=lease.num, actor=LEASE_ACTOR,
                               payload=expiry_payload(todo, lease, tx.now, tx.actor)))
    finally:
        tx.ref = ref
    tx.flush()
    return out


def expired_lease(ev: Event) -> dict[str, Any] | None:
    """What an event says about a lease that ran out (None: it is not such an event)."""
    found = ev.payload.get(LEASE_EXPIRED) if ev.kind == "todo.updated" else None
    return found if isinstance(found, dict) else None


__all__ = ["LEASE_ACTOR", "NO_LEASE", "Lease", "expire_lapsed", "expired_lease", "expiry_payload", "iso",
           "lease_from_row"]
