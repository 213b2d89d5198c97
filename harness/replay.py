"""Replay: any past moment of a session, each change in order, what changed between two
moments, and forks from an old moment.

All of it reads the event log through :meth:`state.store.Store.state_at` (nearest
snapshot, then :func:`state.fold.apply` forward), the same fold the live writes use, so a
replayed list is exactly the list the projection held at that event.

These are the functions the CLI (``harness replay``) and the TUI call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.errors import InputError, UsageError
from harness.render import describe
from state.errors import StoreError
from state.fold import Event, SessionState, TodoState, apply, board_key, diff_todo
from state.store import Store, Tx, normalize_ts


@dataclass(frozen=True)
class Step:
    """One event and the list just after it."""

    event: Event
    description: str
    todos: list[TodoState]

    @property
    def n(self) -> int:
        return self.event.n


@dataclass
class SessionDiff:
    """What changed between event ``a`` and event ``b`` of a session."""

    a: int
    b: int
    added: list[TodoState] = field(default_factory=list)
    removed: list[TodoState] = field(default_factory=list)
    changed: list[tuple[TodoState, dict[str, list[Any]]]] = field(default_factory=list)
    events: int = 0
    actors: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def last_n(store: Store, session_id: int) -> int:
    return store.last_n(session_id)


def _check_n(store: Store, session_id: int, n: int) -> int:
    last = store.last_n(session_id)
    if n < 0 or n > last:
        raise UsageError(f"event {n} is out of range: the session has events 1..{last}")
    return n


def list_at(store: Store, session_id: int, n: int) -> SessionState:
    """The session (todos, runs, verifications, artifacts) just after event ``n``.

    ``n = 0`` is before the first event (an empty list).
    """
    _check_n(store, session_id, n)
    return store.state_at(session_id, n)


def parse_time(text: str) -> str:
    """A time given by a person -> the store's form. ISO 8601; no zone means UTC."""
    try:
        return normalize_ts(text.strip())
    except StoreError:
        raise InputError(f"not a time: {text!r} (expected ISO 8601, e.g. "
                         "2026-11-30T14:05 or 2026-11-30T14:05:00Z)") from None


def n_at_time(store: Store, session_id: int, when: str) -> int:
    """The last event at or before ``when`` (0 if the session had none yet).

    The events table has no index on time (it would cost every write), so this scans the
    session's events; event numbers are the cheap way to seek.
    """
    return store.n_at_time(session_id, parse_time(when))


def point(store: Store, session_id: int, text: str) -> int:
    """``N`` (an event number) or a time -> an event number."""
    if re.fullmatch(r"\s*#?\d+\s*", text):
        return _check_n(store, session_id, int(text.strip().lstrip("#")))
    return n_at_time(store, session_id, text)


def steps(store: Store, session_id: int, *, start: int = 1, end: int | None = None
          ) -> Iterator[Step]:
    """Each event from ``start`` to ``end`` (default: the last), with the list after it.

    Reads the log a page at a time, so a session of a million events streams.
    """
    last = store.last_n(session_id)
    end = last if end is None else _check_n(store, session_id, end)
    start = max(start, 1)
    if start > end:
        return
    state = store.state_at(session_id, start - 1)
    for ev in store.iter_events(session_id, after_n=start - 1, upto_n=end):
        apply(state, ev)
        yield Step(event=ev, description=describe(ev),
                   todos=sorted(state.todos.values(), key=board_key))


def diff(store: Store, session_id: int, a: int, b: int) -> SessionDiff:
    """What changed in the todo list from just after event ``a`` to just after ``b``."""
    _check_n(store, session_id, a)
    _check_n(store, session_id, b)
    sa, sb = store.state_at(session_id, a), store.state_at(session_id, b)
    out = SessionDiff(a=a, b=b)
    for num in sorted(set(sa.todos) | set(sb.todos)):
        old, new = sa.todos.get(num), sb.todos.get(num)
        if old is None and new is not None:
            out.added.append(new)
        elif new is None and old is not None:
            out.removed.append(old)
        elif old is not None and new is not None:
            changes = diff_todo(old, new)
            if changes:
                out.changed.append((new, changes))
    lo, hi = min(a, b), max(a, b)
    for ev in store.iter_events(session_id, after_n=lo, upto_n=hi):
        out.events += 1
        out.actors[ev.actor] = out.actors.get(ev.actor, 0) + 1
    return out


def fork(store: Store, session_id: int, name: str, at_n: int, actor: str = "human") -> int:
    """Start session ``name`` from the list as it was just after event ``at_n``.

    Like checking out an old commit into a branch: the new session's parent is the old
    one, todos keep their ids, fields and origin; runs, verifications and artifacts stay
    with the parent. One transaction: a failed fork leaves nothing behind.
    """
    state = list_at(store, session_id, at_n)
    if not name or not name.strip():
        raise InputError("a fork needs a session name")
    with store.write_new(name, actor=actor, parent_id=session_id, fork_n=at_n) as tx:
        _copy_todos(tx, state)
        return tx.session_id


def _copy_todos(tx: Tx, state: SessionState) -> None:
    # A todo can only depend on todos that exist, so create them dependencies first.
    pending = {t.num: t for t in state.by_position()}
    while pending:
        ready = [t for t in pending.values()
                 if all(d not in pending for d in t.depends_on if d in state.todos)]
        if not ready:  # a cycle cannot be stored, but do not loop if one ever is
            ready = list(pending.values())
        for t in ready:
            deps = [d for d in t.depends_on if d in tx.state.todos]
            tx.create_todo(t.content, status=t.status, priority=t.priority,
                           position=t.position, active_form=t.active_form, stage=t.stage,
                           depends_on=deps, blocked_reason=t.blocked_reason,
                           origin=t.origin, num=t.num)
            del pending[t.num]


__all__ = ["SessionDiff", "Step", "diff", "fork", "last_n", "list_at", "n_at_time",
           "parse_time", "point", "steps"]
