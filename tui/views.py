"""What the screens show, as plain frozen values built on the store thread.

The store thread folds events into a :class:`state.fold.SessionState` and hands the UI
these views. TodoStates are replaced, never mutated, by the fold, so sharing them is
safe; RunStates are mutated in place, so views carry copies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from harness.charts.model import RunSeries
from harness.render import claim_label
from harness.served_view import Comparison, comparisons, verification_figures
from state.fold import (
    Event,
    RunState,
    SessionState,
    TodoState,
    VerificationState,
    unmet_dependencies,
)
from state.leases import Lease
from state.series import SeriesPoint


@dataclass(frozen=True)
class BoardView:
    """The board and its header: one session, live or as of event ``n``."""

    session_id: int
    session_name: str
    pipeline: str | None
    n: int
    todos: Mapping[int, TodoState]
    running: tuple[RunState, ...] = ()
    replay: bool = False
    #: todo number -> the headline figures of its latest verification ("τ 1.87  1.04x")
    figures: Mapping[int, str] = field(default_factory=dict)
    #: the live leases of claimed todos, read when the store's clock said ``lease_clock``,
    #: at ``read_at`` on this process's monotonic clock (so time left moves on between reads)
    leases: Mapping[int, Lease] = field(default_factory=dict)
    lease_clock: float = 0.0
    read_at: float = 0.0

    def claims(self, monotonic_now: float) -> dict[int, tuple[str, bool]]:
        """Per claimed todo in progress: who holds it and the time left on its lease
        ("w3 · 12m left"), and whether that lease has run out (not ended yet)."""
        now = self.lease_clock + (monotonic_now - self.read_at)
        out = {}
        for t in self.todos.values():
            if t.claimed_by is not None and t.status == "in_progress":
                lease = self.leases.get(t.num)
                label = claim_label(t, lease, now)
                if label is not None:
                    ran_out = (lease is not None and lease.holder == t.claimed_by
                               and lease.left(now) <= 0)
                    out[t.num] = (label, ran_out)
        return out


@dataclass(frozen=True)
class DetailView:
    """One todo with its evidence. ``todo`` is None when nothing is selected."""

    todo: TodoState | None
    waiting_on: tuple[int, ...] = ()
    history: tuple[Event, ...] = ()
    runs: tuple[RunState, ...] = ()
    verifications: tuple[VerificationState, ...] = ()
    live: bool = True
    #: each served benchmark beside the offline verification of the same checkpoint
    comparisons: tuple[Comparison, ...] = ()
    #: the todo's live lease, and the store's clock when it was read
    lease: Lease | None = None
    lease_clock: float | None = None


@dataclass(frozen=True)
class LogUpdate:
    """New lines of a run's log. ``reset`` starts a new run's tail."""

    run_id: int | None
    lines: tuple[str, ...] = ()
    partial: str = ""
    reset: bool = False


@dataclass(frozen=True)
class SeriesUpdate:
    """New points of the run the detail pane follows. ``reset`` starts a new run's."""

    run_id: int | None
    points: tuple[SeriesPoint, ...] = ()
    reset: bool = False
    stage: str | None = None


@dataclass(frozen=True)
class ChartsView:
    """Every run of one todo that recorded series, oldest first, for the chart screen."""

    todo: TodoState | None
    runs: tuple[RunSeries, ...] = ()
    stage: str | None = None


@dataclass(frozen=True)
class ReplayView:
    """The session as it was just after event ``n`` of ``total``."""

    n: int
    total: int
    event: Event | None
    board: BoardView
    detail: DetailView


def running_runs(state: SessionState) -> tuple[RunState, ...]:
    return tuple(replace(r) for r in sorted(state.runs.values(), key=lambda r: r.id)
                 if r.state == "running")


def board_view(state: SessionState, *, name: str, pipeline: str | None,
               replay: bool = False, leases: Mapping[int, Lease] | None = None,
               lease_clock: float = 0.0, read_at: float = 0.0) -> BoardView:
    return BoardView(session_id=state.session_id, session_name=name, pipeline=pipeline,
                     n=state.n, todos=dict(state.todos), running=running_runs(state),
                     replay=replay, figures=latest_figures(state), leases=dict(leases or {}),
                     lease_clock=lease_clock, read_at=read_at)


def latest_figures(state: SessionState) -> dict[int, str]:
    """Per todo, the figures of its newest verification that has any."""
    out: dict[int, str] = {}
    for v in sorted(state.verifications.values(), key=lambda v: v.id):
        text = verification_figures(v.metrics)
        if v.todo_id is not None and text:
            out[v.todo_id] = text
    return out


def narrow_figures(text: str) -> str:
    """The short form of :func:`verification_figures` for a narrow board row: ``τ1.87``
    and a served speedup (``τ3.11 1.42x``); the reference loop's bound and projection
    give way first, since a bare number there would read as served. The detail pane has
    them in words."""
    text = re.sub(r"\s*(≤\d+\.\d+x ref|\d+\.\d+x proj)\b", "", text)
    text = re.sub(r"(\d+\.\d+x) served c=\d+", r"\1", text)
    return text.replace("τ ", "τ").replace("  ", " ").strip()


def detail_view(state: SessionState, num: int | None, history: list[Event], *,
                live: bool, leases: Mapping[int, Lease] | None = None,
                lease_clock: float | None = None) -> DetailView:
    todo = state.todos.get(num) if num is not None else None
    if todo is None:
        return DetailView(todo=None, live=live)
    runs = tuple(replace(r) for r in sorted(state.runs.values(), key=lambda r: r.id)
                 if r.todo_id == num)
    verifs = tuple(v for v in sorted(state.verifications.values(), key=lambda v: v.id)
                   if v.todo_id == num)
    return DetailView(todo=todo, waiting_on=tuple(unmet_dependencies(todo, state.todos)),
                      history=tuple(history), runs=runs, verifications=verifs, live=live,
                      comparisons=tuple(comparisons(verifs, state.verifications.values())),
                      lease=(leases or {}).get(todo.num), lease_clock=lease_clock)


def current_run(detail: DetailView) -> RunState | None:
    """The run whose log the detail pane follows: a running one, else the latest."""
    for run in reversed(detail.runs):
        if run.state == "running":
            return run
    return detail.runs[-1] if detail.runs else None
