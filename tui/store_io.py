"""The TUI's one thread for the store: it writes, reads, watches and replays.

Everything that touches the database runs here, in the order it was asked for, so a
person's "start, then done" cannot land the other way round and the event loop never
waits on the database. Change detection is :meth:`state.store.Store.watch` (SQLite's
``PRAGMA data_version``, PostgreSQL's LISTEN/NOTIFY), polled every ``interval`` seconds;
when it moves, the thread reads the session's new events and folds them with
:func:`state.fold.apply`, the same fold the store itself uses, so the board is exactly
the projection without re-reading every todo.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from harness.charts.model import RunSeries, is_series
from harness.errors import KNOWN_ERRORS, render
from state import retry
from state.errors import StoreUnreachable
from state.fold import Event, SessionState, apply
from state.leases import Lease
from state.store import Store
from tui.messages import (
    BoardRefreshed,
    ChartsLoaded,
    DetailRefreshed,
    LogTailed,
    ReplayLoaded,
    SeriesTailed,
    Settled,
    StoreProblem,
    WriteDone,
)
from tui.text import log_line
from tui.views import (
    BoardView,
    ChartsView,
    DetailView,
    LogUpdate,
    ReplayView,
    SeriesUpdate,
    board_view,
    current_run,
    detail_view,
)

# A change to make, run on the store thread; it says what happened.
Job = Callable[[], WriteDone]

LOG_KEEP = 2000  # lines of a run's log kept in the tail
LEASE_EVERY = 1.0  # seconds between reads of the live leases while any claim has one
_PAGE = 512  # events read per step when searching for the next status change


def is_status_change(ev: Event) -> bool:
    return ev.kind == "todo.updated" and "status" in ev.payload.get("changes", {})


@dataclass
class _LogFollow:
    run_id: int | None = None
    offset: int = 0
    partial: str = ""

    def feed(self, data: str) -> tuple[list[str], str]:
        text = self.partial + data
        *done, self.partial = text.split("\n")
        # a series point is drawn on the charts, not read in the log
        return [log_line(x) for x in done if not is_series(x)], \
            "" if is_series(self.partial) else log_line(self.partial)


@dataclass
class _SeriesFollow:
    run_id: int | None = None
    after: int = -1  # the byte offset of the last point's line


class StoreIO:
    """Owns the store work of one app. UI-side methods only enqueue; :meth:`run` is the
    thread body (the app runs it in a thread worker)."""

    def __init__(self, store: Store, session_id: int, post: Callable[[Message], Any], *,
                 interval: float = 0.1):
        self.store = store
        self.session_id = session_id
        self.interval = interval
        self.polls = 0
        self.stopped = threading.Event()
        self._post = post
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        # Thread side only from here on.
        self._state: SessionState | None = None
        self._name = ""
        self._pipeline: str | None = None
        self._selected: int | None = None
        self._shown: int | None = -1  # the todo the detail pane shows (-1: none yet)
        self._log = _LogFollow()
        self._series = _SeriesFollow()
        self._replay_target: int | None = None
        self._replay_selected: int | None = None
        self._replay_total = 0
        self._replay_dirty = False
        self._replay_state: SessionState | None = None
        self._problem = ""
        # The session's live leases (state/leases.py): heartbeats move them without an
        # event, so they are read again every LEASE_EVERY seconds while a claim has one.
        self._leases: dict[int, Lease] = {}
        self._lease_clock = 0.0
        self._leases_read = 0.0

    # -- asked for by the UI (any thread) ------------------------------------------------
    def select(self, num: int | None) -> None:
        self._queue.put(("select", num))

    def submit(self, job: Job) -> None:
        self._queue.put(("write", job))

    def barrier(self, token: int) -> None:
        self._queue.put(("barrier", token))

    def replay(self, how: str, value: int | None = None) -> None:
        """``enter`` (at event ``value``, default the last), ``goto`` N, ``step`` ±k,
        ``jump`` ±1 (to the previous/next status change), ``select`` a todo."""
        self._queue.put(("replay", (how, value)))

    def leave_replay(self) -> None:
        self._queue.put(("live", None))

    def charts(self, num: int) -> None:
        """Every run of todo ``num`` that recorded series (the chart screen)."""
        self._queue.put(("charts", num))

    def switch_session(self, session_id: int) -> None:
        self._queue.put(("session", session_id))

    def stop(self) -> None:
        self._queue.put(("stop", None))

    # -- the thread ----------------------------------------------------------------------
    def run(self, cancelled: Callable[[], bool]) -> None:
        watch = None
        try:
            watch = self.store.watch()
            first = True
            while not cancelled():
                try:
                    # The first round loads at once; then wait for work or the next poll.
                    items = [self._queue.get(timeout=0 if first else self.interval)]
                except queue.Empty:
                    items = []
                first = False
                while True:
                    try:
                        items.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if self._step(watch, items):
                    break
        except KNOWN_ERRORS as exc:
            self._post(StoreProblem(f"{render(exc)}; live updates stopped"))
        finally:
            if watch is not None:
                watch.close()
            self.stopped.set()

    def _step(self, watch: Any, items: list[tuple[str, Any]]) -> bool:
        stop = False
        done: list[WriteDone] = []
        barriers: list[int] = []
        for kind, value in items:
            if kind == "write":
                done.append(self._run_job(value))
            elif kind == "select":
                self._selected = value
            elif kind == "barrier":
                barriers.append(value)
            elif kind == "replay":
                self._replay_request(*value)
            elif kind == "live":
                self._replay_target = self._replay_state = None
            elif kind == "charts":
                self._send_charts(value)
            elif kind == "session":
                self.session_id = value
                self._state = None
                self._selected = None
                self._shown = -1
                self._replay_target = self._replay_state = None
            elif kind == "stop":
                stop = True
        if stop:
            return True
        try:
            # A read that meets the server away fails at once here (no budget: this loop
            # is the retry, every poll), so the board can say so while it waits.
            retry.run(lambda: self._refresh(watch), cap_s=0)
            if self._problem:
                self._problem = ""
                self._post(StoreProblem("store reachable again", severity="information"))
        except KNOWN_ERRORS as exc:
            # A locked, vanished or unreachable database: say so once, keep trying.
            text = render(exc)
            if isinstance(exc, StoreUnreachable):
                text = f"store unreachable, retrying ({exc.message.split(';')[0]})"
            if text != self._problem:
                self._problem = text
                self._post(StoreProblem(text))
        for msg in done:
            self._post(msg)
        for token in barriers:
            self._post(Settled(token))
        return False

    def _run_job(self, job: Job) -> WriteDone:
        try:
            # A person's change waits out a store that went away, within its budget.
            return retry.run(job, what="the change")
        except KNOWN_ERRORS as exc:
            return WriteDone(render(exc), severity="error")

    # -- live ----------------------------------------------------------------------------
    def _refresh(self, watch: Any) -> None:
        # Someone committed something, somewhere (events, or log lines, which are not).
        changed = watch.changed()
        self.polls += 1
        first = self._state is None
        touched: set[int] = set()
        board_changed = first
        if first:
            self._state = self.store.state_at(self.session_id)
            self._read_session()
        elif changed:
            events = self.store.events(self.session_id, after_n=self._state.n)
            for ev in events:
                apply(self._state, ev)
                if ev.todo_id is not None:
                    touched.add(ev.todo_id)
            meta = (self._name, self._pipeline)
            self._read_session()  # the pipeline may be set without an event
            board_changed = bool(events) or meta != (self._name, self._pipeline)
        state = self._state
        assert state is not None
        leases_changed = self._read_leases(state, first or changed or board_changed)
        board_changed |= leases_changed
        if board_changed:
            self._post(BoardRefreshed(self._board(state), self.polls))
        selected = state.todos.get(self._selected) if self._selected is not None else None
        # The selected todo's detail changes with its own events, and its "waiting on"
        # with its dependencies' events.
        affected = selected is not None and (
            selected.num in touched or not touched.isdisjoint(selected.depends_on)
            or (leases_changed and selected.claimed_by is not None))
        if self._selected != self._shown or affected:
            self._send_detail()
        elif changed:
            self._tail_log()  # log output is written without events, and so are points
            self._tail_series()
        if self._replay_target is not None and (self._replay_dirty or board_changed):
            self._send_replay()

    def _board(self, state: SessionState) -> BoardView:
        return board_view(state, name=self._name, pipeline=self._pipeline,
                          leases=self._leases, lease_clock=self._lease_clock,
                          read_at=self._leases_read)

    def _read_leases(self, state: SessionState, changed: bool) -> bool:
        """Read the live leases when something changed or LEASE_EVERY has passed (only
        while a todo has a leased claim); whether they differ from the last read."""
        leased = any(t.lease_s is not None for t in state.todos.values())
        if not leased:
            if not self._leases:
                return False
            self._leases = {}
            return True
        mono = time.monotonic()
        if not changed and mono - self._leases_read < LEASE_EVERY:
            return False
        before = self._leases
        self._lease_clock, self._leases = self.store.leases(self.session_id)
        self._leases_read = mono
        return self._leases != before

    def _read_session(self) -> None:
        row = self.store.session_by_id(self.session_id)
        self._name = row.name if row else str(self.session_id)
        self._pipeline = row.pipeline if row else None

    def _send_detail(self) -> None:
        assert self._state is not None
        num = self._selected
        history = self.store.events(self.session_id, todo_id=num) if num is not None else []
        view = detail_view(self._state, num, history, live=True, leases=self._leases,
                           lease_clock=self._lease_clock
                           + (time.monotonic() - self._leases_read))
        self._shown = num
        self._post(DetailRefreshed(view))
        self._follow(view)

    def _follow(self, view: DetailView) -> None:
        run = current_run(view)
        run_id = run.id if run else None
        if run_id != self._log.run_id:
            self._log = _LogFollow(run_id=run_id)
            lines, partial = self._read_log()
            self._post(LogTailed(LogUpdate(run_id, tuple(lines[-LOG_KEEP:]), partial,
                                           reset=True)))
        else:
            self._tail_log()
        if run_id != self._series.run_id:
            self._series = _SeriesFollow(run_id=run_id)
            self._post(SeriesTailed(SeriesUpdate(run_id, tuple(self._read_series()),
                                                 reset=True, stage=run.stage if run else None)))
        else:
            self._tail_series()

    def _read_series(self) -> list[Any]:
        if self._series.run_id is None:
            return []
        points = self.store.series([self._series.run_id], after=self._series.after)
        if points:
            self._series.after = points[-1].start
        return points

    def _tail_series(self) -> None:
        points = self._read_series()
        if points:
            self._post(SeriesTailed(SeriesUpdate(self._series.run_id, tuple(points))))

    def _send_charts(self, num: int | None) -> None:
        state = self._state
        if num is None or state is None:
            return
        todo = state.todos.get(num)
        counted = self.store.series_runs(self.session_id)
        runs = [r for r in sorted(state.runs.values(), key=lambda r: r.id)
                if r.todo_id == num and counted.get(r.id)]
        points = self.store.series([r.id for r in runs])
        series = tuple(RunSeries(r.id, f"r{r.id}", tuple(p for p in points
                                                         if p.run_id == r.id))
                       for r in runs)
        self._post(ChartsLoaded(ChartsView(todo, series,
                                           stage=todo.stage if todo is not None else None)))

    def _read_log(self) -> tuple[list[str], str]:
        if self._log.run_id is None:
            return [], ""
        data, self._log.offset = self.store.log(self._log.run_id, self._log.offset)
        return self._log.feed(data) if data else ([], "")

    def _tail_log(self) -> None:
        if self._log.run_id is None:
            return
        before = (self._log.offset, self._log.partial)
        lines, partial = self._read_log()
        if (self._log.offset, self._log.partial) != before:
            self._post(LogTailed(LogUpdate(self._log.run_id, tuple(lines), partial)))

    # -- replay --------------------------------------------------------------------------
    def _replay_request(self, how: str, value: int | None) -> None:
        if how != "enter" and self._replay_target is None:
            return  # replay was left; a late request from its screen means nothing now
        total = self.store.last_n(self.session_id)
        self._replay_total = total
        current = self._replay_target if self._replay_target is not None else total
        if how == "enter":
            target = total if value is None else value
            self._replay_selected = self._selected
        elif how == "goto":
            target = value if value is not None else current
        elif how == "last":
            target = total
        elif how == "step":
            target = current + (value or 0)
        elif how == "jump":
            target = self._find_status_change(current, value or 1)
        elif how == "select":
            self._replay_selected = value
            target = current
        else:
            return
        self._replay_target = min(max(target, 1 if total else 0), total)
        self._replay_dirty = True

    def _find_status_change(self, n: int, direction: int) -> int:
        sid = self.session_id
        if direction > 0:
            after = n
            while True:
                page = self.store.events(sid, after_n=after, kinds=["todo.updated"],
                                         limit=_PAGE)
                for ev in page:
                    if is_status_change(ev):
                        return ev.n
                if len(page) < _PAGE:
                    return n
                after = page[-1].n
        upto = n - 1
        while upto > 0:
            lo = max(upto - _PAGE * 4, 0)
            page = self.store.events(sid, after_n=lo, upto_n=upto, kinds=["todo.updated"])
            for ev in reversed(page):
                if is_status_change(ev):
                    return ev.n
            upto = lo
        return n

    def _send_replay(self) -> None:
        n = self._replay_target
        assert n is not None
        sid = self.session_id
        total = self.store.last_n(sid)
        if self._replay_state is None or self._replay_state.n != n:
            self._replay_state = self.store.state_at(sid, n)  # a snapshot seek, then a fold
        state = self._replay_state
        event = next(iter(self.store.events(sid, after_n=n - 1, upto_n=n)), None) if n else None
        num = self._replay_selected
        history = self.store.events(sid, todo_id=num, upto_n=n) if num is not None else []
        if self._state is None:
            self._read_session()
        board = board_view(state, name=self._name, pipeline=self._pipeline, replay=True)
        self._replay_dirty = False
        self._post(ReplayLoaded(ReplayView(n=n, total=total, event=event, board=board,
                                           detail=detail_view(state, num, history,
                                                              live=False))))
