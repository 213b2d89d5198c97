"""Leases on claims, as agents and people use them: the length a claim gets, heartbeats
(asked for, and the free one every hook and MCP call gives), and the sweep.

The model lives in :mod:`state.leases` (rows, expiry inside every write transaction);
this module decides when to touch it:

* :func:`renew` is what every hook call and MCP call of an agent does first. It costs one
  indexed read when the agent holds no lease and nothing has run out (no write at all);
  an UPDATE under the write lock when it holds some; a write transaction that ends what
  ran out (and renews the rest) when something has. A lease that ran out is never taken
  back by a late sign of life: it is ended, and the agent hears of it in the notice of
  what others changed (:mod:`harness.agents.notice`), which its answer carries next.
* :func:`heartbeat` is ``harness heartbeat``: the same in a transaction of its own, with
  an answer: what it renewed until when, and the leases it lost since it last asked.
* :func:`sweep` is ``harness sweep``: ends what ran out in one session or all.
* A session's default lease (``harness session set claim-lease 30m``) is a store setting
  (``meta``), read by the claim's own transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.render import duration_text, expiry_text, iso_time
from state.db.sql import EVENT_COLS, LEASE_COLS, event_from_row
from state.errors import StoreError
from state.fold import Event
from state.leases import LEASE_ACTOR, NO_LEASE, Lease, expired_lease, iso, lease_from_row
from state.store import Store, Tx

SETTING = "claim-lease"
# A write by the agent this long ago in this process was its heartbeat already.
RECENT = 1.0
# The mark of the expiries `harness heartbeat` has told an agent of (an agent view).
TOLD_SUFFIX = "/leases"


def _meta_key(session_id: int) -> str:
    return f"claim_lease:{session_id}"


# -- the session's default -----------------------------------------------------------------

_DEFAULT_SQL = "SELECT value FROM meta WHERE key = ?"


def _seconds(row: Any) -> float:
    try:
        return float(row[0]) if row else NO_LEASE
    except ValueError:
        return NO_LEASE


def session_lease(tx: Tx) -> float:
    """The session's default lease in seconds (:data:`NO_LEASE`: none), read in the
    claim's own transaction."""
    return _seconds(tx.fetch_one(_DEFAULT_SQL, _meta_key(tx.session_id)))


def stored_session_lease(store: Store, session_id: int) -> float:
    """The session's default lease, read outside a transaction (``session list``)."""
    return _seconds(store._first(_DEFAULT_SQL, (_meta_key(session_id),)))


def set_session_lease(store: Store, session_id: int, seconds: float) -> None:
    with store.write(session_id, "human") as tx:
        tx.set_meta(_meta_key(session_id), repr(float(seconds)))


# -- renewal ---------------------------------------------------------------------------------

def renew(store: Store, session_id: int, actor: str) -> None:
    """An agent's call is its heartbeat: renew what ``actor`` holds, end what ran out.

    No write at all when it holds nothing, or renewed what it holds less than a tenth of
    its length ago, and nothing ran out (one indexed read): an agent that calls often
    writes at most ten renewals per lease length, and its lease runs out no sooner than
    nine tenths of its length after its last call. A store this user may not write is left
    alone (a read-only copy, a role without the grants).
    """
    if store.read_only is not None or store.leases_checked(session_id, actor, RECENT):
        return  # the call's own write did it (a hook's todo change, a claim)
    now, earliest, due = store.lease_check(session_id, actor)
    try:
        if earliest is not None and earliest <= now:
            store.expire_lapsed(session_id, actor)  # its transaction renews the rest
        elif due:
            store.renew_leases(session_id, actor)
    except StoreError as exc:
        if not exc.message.startswith("not allowed"):
            raise


@dataclass
class Heartbeat:
    """What ``harness heartbeat`` did for ``actor``: the leases it holds now (renewed),
    and those it lost since it was last told (the events that ended them)."""

    actor: str
    session: str
    now: float
    held: list[Lease] = field(default_factory=list)
    lost: list[Event] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"renewed t{lease.num} until {iso_time(lease.expires_at)} "
               f"(lease {duration_text(lease.lease_s)})" for lease in self.held]
        if not self.held:
            out.append(f"{self.actor} holds no lease in session {self.session}")
        return out

    def refusals(self) -> list[str]:
        return [lost_line(ev) for ev in self.lost]

    def to_json(self) -> dict[str, Any]:
        return {"actor": self.actor, "session": self.session, "now": iso(self.now),
                "renewed": [{"id": f"t{lease.num}", **lease.to_json()} for lease in self.held],
                "lost": [{"id": f"t{ev.todo_id}", "n": ev.n, **(expired_lease(ev) or {})}
                         for ev in self.lost]}


def lost_line(ev: Event) -> str:
    """``t3: lease of agent:w3 ran out at 12:00:03 (last heartbeat 12:00:01); it is
    pending again and no longer yours``."""
    info = expired_lease(ev) or {}
    return (f"t{ev.todo_id}: {expiry_text(info)}; it is pending again and no longer yours "
            "(claim work again with `harness next --claim`)")


def heartbeat(store: Store, session_id: int, session_name: str, actor: str) -> Heartbeat:
    """Renew every lease ``actor`` holds in the session, in a write transaction (which
    ends first whatever ran out: a late heartbeat takes nothing back), and find the
    leases it lost that it has not been told of by an earlier heartbeat."""
    with store.write(session_id, actor) as tx:
        tx.renew_leases()  # asked for: however recently it was renewed
        held = [lease_from_row(r) for r in tx.fetch_all(
            f"SELECT {LEASE_COLS} FROM leases WHERE session_id = ? AND holder = ? "
            "ORDER BY num", session_id, actor)]
        key = actor + TOLD_SUFFIX
        raw = tx.agent_view_text(key)
        try:
            told = int(json.loads(raw)["n"]) if raw else 0
        except (ValueError, KeyError, TypeError):
            told = 0
        lost = []
        if told < tx.state.n:
            rows = tx.fetch_all(f"SELECT {EVENT_COLS} FROM events WHERE session_id = ? "
                                "AND n > ? AND actor = ? AND kind = 'todo.updated' ORDER BY n",
                                session_id, told, LEASE_ACTOR)
            lost = [ev for ev in map(event_from_row, rows)
                    if (expired_lease(ev) or {}).get("holder") == actor]
            tx.set_agent_view(key, {"n": tx.state.n})
        return Heartbeat(actor=actor, session=session_name, now=tx.now, held=held, lost=lost)


# -- the sweep ---------------------------------------------------------------------------------

def sweep(store: Store, session_ids: list[int] | None, *, actor: str = "human"
          ) -> list[Event]:
    """End the leases that ran out in these sessions (None: every session), each session
    in a transaction of its own; returns the events."""
    ids = store.lapsed_sessions() if session_ids is None else session_ids
    out: list[Event] = []
    for sid in ids:
        out += store.expire_lapsed(sid, actor)
    return out


__all__ = ["SETTING", "Heartbeat", "heartbeat", "lost_line", "renew", "session_lease",
           "set_session_lease", "stored_session_lease", "sweep"]
