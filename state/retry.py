"""Riding out a store that goes away for a while: bounded retry of whole operations, and
the client-made ids that keep a retried write from landing twice.

A PostgreSQL server restarts (an upgrade, a failover, a managed service's maintenance
window) and networks drop connections. Every caller that faces a person or an agent
(a command, an MCP tool call, a TUI change, a step of ``harness run``, a hook) runs its
store work as one *operation* through :func:`run`: when it meets
:class:`~state.errors.StoreUnreachable` (a dropped connection, a refused connect, a
server starting up or shutting down, a serialization failure) the operation starts
again from the top after a pause, until the *budget* is spent: 30 s from its start by
default, the store URL's ``retry_s`` or ``HARNESS_RETRY_S`` otherwise (every wait for
the server's answer ends there too, :mod:`state.db.pg`). Then the last error goes up
with what was not written.

Every write transaction of an operation gets a key, the operation's random id plus the
place in the code that wrote and how many times it has written there
(:meth:`Operation.key`), stored on its first event under a unique constraint. A commit
can land while its acknowledgement is lost: the next attempt finds its key stored and
replays the transaction against the session as it stood before it, writing nothing
(:mod:`state.tx`). So a retry never writes an event twice, and the answer is the one
the first attempt would have given.

Why a loop of our own and not tenacity: one deadline and one operation id must be shared
by every level that retries (an operation, the reads inside it), the budget comes from
the store that failed (its URL), and the loop is twenty lines; the hot path of an agent's
hook would otherwise import a package on every call for code it almost never runs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from state.errors import StoreUnreachable

__all__ = ["DEFAULT_BUDGET_S", "ENV", "URL_KEY", "Operation", "again", "budget_s", "current",
           "retried", "run", "take_budget"]

T = TypeVar("T")

DEFAULT_BUDGET_S = 30.0
ENV = "HARNESS_RETRY_S"
URL_KEY = "retry_s"
# Backoff: the first pause is short (a dropped connection is often back at once), then
# doubling to a ceiling, each drawn at random in its upper half so that writers cut off
# together do not come back together.
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 1.0


def _seconds(text: str, where: str) -> float:
    from state.errors import StoreError

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise StoreError(f"the retry budget must be a number of seconds, 0 or more "
                         f"(got {text!r})", where=where)
    return value


def take_budget(url: str) -> tuple[str, float | None]:
    """The URL without its ``retry_s`` key, and that key's value (None: not given).

    Taken out before anything else reads the URL: the driver does not know the key, and
    the URL keys a user's current session, which must not change with the budget."""
    head, sep, query = url.partition("?")
    if not sep or URL_KEY not in query:
        return url, None
    keep, value = [], None
    for part in query.split("&"):
        name, _, text = part.partition("=")
        if name == URL_KEY:
            value = _seconds(text, f"{head}: ?{URL_KEY}=")
        else:
            keep.append(part)
    return head + ("?" + "&".join(keep) if keep else ""), value


def budget_s(from_url: float | None = None) -> float:
    """Seconds an operation keeps retrying: the store URL's ``retry_s``, else
    ``HARNESS_RETRY_S``, else 30 (0 turns retries off)."""
    if from_url is not None:
        return from_url
    text = os.environ.get(ENV)
    return _seconds(text, ENV) if text else DEFAULT_BUDGET_S


@dataclass
class Operation:
    """One operation: its id, its attempts, its deadline, the keys of its writes."""

    id: str
    replay: bool = False  # check each write's key against the store first
    cap_s: float | None = None  # the budget, at most
    attempt: int = 1
    started: float = field(default_factory=time.monotonic)
    landed: int = 0  # writes of this operation whose commit was acknowledged
    skip: set[str] = field(default_factory=set)  # keys a different write had taken
    _counts: dict[str, int] = field(default_factory=dict)

    def key(self, site: str) -> str:
        """The key of the next write made at ``site`` (a place in the code) in this
        attempt: the same write gets the same key in every attempt, even when an attempt
        takes another path around it (a session created by the first attempt is not
        created again by the second, and the write after it keeps its key)."""
        while True:
            n = self._counts[site] = self._counts.get(site, 0) + 1
            key = f"{self.id}.{site}.{n}"
            if key not in self.skip:
                return key

    def budget(self, from_url: float | None) -> float:
        """The budget for a store whose URL says ``from_url`` (None: nothing)."""
        budget = budget_s(from_url)
        return budget if self.cap_s is None else min(budget, self.cap_s)

    def left(self, from_url: float | None) -> float:
        """Seconds left of the budget (the store's waits for an answer end there too)."""
        return self.started + self.budget(from_url) - time.monotonic()


_current: ContextVar[Operation | None] = ContextVar("harness_operation", default=None)


def current() -> Operation | None:
    """The operation this thread is running, if any."""
    return _current.get()


def new_id() -> str:
    return os.urandom(12).hex()


def call_site(depth: int = 2) -> str:
    """A short name for the code that called our caller: its file and line."""
    frame = sys._getframe(depth)
    name = frame.f_code.co_filename.rsplit("/", 1)[-1].removesuffix(".py")
    return f"{name}:{frame.f_lineno}"


def _pause(op: Operation, exc: StoreUnreachable, what: str | None, tries: int) -> None:
    """Wait before try ``tries + 1``, or raise ``exc`` saying what was not written."""
    left = op.left(exc.retry_s)
    if left <= 0:
        raise exc.gave_up(op.budget(exc.retry_s), what, op.landed) from None
    import random

    step = min(MAX_PAUSE_S, FIRST_PAUSE_S * 2 ** min(tries - 1, 10))
    time.sleep(min(left, random.uniform(step / 2, step)))


def run(fn: Callable[[], T], *, what: str | None = None, op_id: str | None = None,
        replay: bool = False, cap_s: float | None = None,
        on_retry: Callable[[StoreUnreachable], None] | None = None) -> T:
    """Run ``fn`` as one operation, again from the top while it meets an unreachable
    store and the budget lasts.

    Inside another operation it simply runs (the outer one retries the whole).
    ``op_id`` and ``replay``: go on with an operation begun elsewhere (a hook's payload
    kept in the spool), whose writes may have landed. ``cap_s``: a budget of at most
    this (a hook must answer its agent in time). ``what`` names the work in the error
    when the budget runs out; ``on_retry`` hears of each failure before the pause.
    """
    if _current.get() is not None:
        return fn()
    op = Operation(op_id or new_id(), replay=replay, cap_s=cap_s)
    while True:
        token = _current.set(op)
        try:
            return fn()
        except StoreUnreachable as exc:
            if exc.diverged is not None:
                # A landed write under this key was another write: a fresh key next time.
                op.skip.add(exc.diverged)
            else:
                if on_retry is not None:
                    on_retry(exc)
                _pause(op, exc, what, op.attempt)
        finally:
            _current.reset(token)
        op.attempt += 1
        op.replay = True
        op._counts.clear()


def again(fn: Callable[[], T]) -> T:
    """Run ``fn``, a step that may simply be repeated (a read), again while it meets an
    unreachable store: within the current operation's deadline, or a budget of its own."""
    op = _current.get() or Operation("read")  # the operation's deadline, else one of its own
    tries = 1
    while True:
        try:
            return fn()
        except StoreUnreachable as exc:
            if exc.diverged is not None:
                raise
            _pause(op, exc, None, tries)
            tries += 1


def retried(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` as one operation (:func:`run`) each time it is called: for the steps of a
    long-lived client (a pipeline run's), each of which may simply run again."""
    import functools

    @functools.wraps(fn)
    def step(*args: object, **kwargs: object) -> T:
        return run(lambda: fn(*args, **kwargs), what=fn.__name__.strip("_").replace("_", " "))
    return step
