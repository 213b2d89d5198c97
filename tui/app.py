"""The Textual app: a live board of one session, its detail, and replay.

Reads and writes happen on one store thread (:mod:`tui.store_io`), which posts messages
back; the screens only show what they are sent and ask for changes, which are the
:mod:`harness.todos` use cases with actor ``human`` (:mod:`tui.changes`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

from textual import work
from textual.app import App, SystemCommand
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.worker import get_current_worker

from state.store import Store
from tui.crash import Crash, record
from tui.keys import APP_KEYS, BOARD_KEYS, CHART_KEYS, REPLAY_KEYS, KeyAction, bindings
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
from tui.screens.board import BoardScreen
from tui.screens.charts import ChartScreen
from tui.screens.help import HelpScreen
from tui.screens.replay import ReplayScreen
from tui.store_io import Job, StoreIO
from tui.widgets.board import Board

POLL_INTERVAL = 0.1  # seconds between change checks: well inside the half-second promise


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class HarnessApp(App[None]):
    """``HarnessApp(store, session_id)``; ``replay=True`` opens in replay at the last event.

    ``keymap`` maps binding ids to keys (see :mod:`tui.keys`); ``clock`` gives "now" for
    running durations (tests pin it).
    """

    CSS_PATH = str(Path(__file__).with_name("app.tcss"))  # absolute: subclasses live elsewhere
    TITLE = "todo-harness"
    BINDINGS = bindings(APP_KEYS)

    def __init__(self, store: Store, session_id: int, *, replay: bool = False,
                 keymap: dict[str, str] | None = None,
                 clock: Callable[[], datetime] = utc_now,
                 interval: float = POLL_INTERVAL) -> None:
        super().__init__()
        self.store = store
        self.session_id = session_id
        self.clock = clock
        self.io = StoreIO(store, session_id, self.post_message, interval=interval)
        self.board_screen = BoardScreen()
        self.replay_screen: ReplayScreen | None = None
        self.chart_screen: ChartScreen | None = None
        self.last_refresh_poll = 0  # the store thread's poll that found the last change
        self._open_in_replay = replay
        self._user_keymap = dict(keymap or {})
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[None]] = {}
        #: the exception that ended the app, if one did (``harness tui`` reports it)
        self.crash: Crash | None = None

    def get_default_screen(self) -> Screen:
        return self.board_screen

    def on_mount(self) -> None:
        if self._user_keymap:
            self.set_keymap(self._user_keymap)
        self.set_interval(0.5, self.make_room_for_toasts)  # toasts expire, or are clicked away
        # Screens keep what arrives before their widgets exist, so the store thread can
        # start now and read while Textual sets up the screen.
        self._store_loop()
        if self._open_in_replay:
            self.enter_replay()

    # The store's own errors are handled in the thread (a line on the board); anything else
    # ends the app as a crash (below), rather than leaving a board that no longer moves.
    @work(thread=True, exclusive=True, exit_on_error=True, group="store")
    def _store_loop(self) -> None:
        worker = get_current_worker()
        self.io.run(lambda: worker.is_cancelled)

    def on_unmount(self) -> None:
        self.io.stop()

    def _handle_exception(self, error: Exception) -> None:
        # Textual calls this for any exception a handler, a worker or a screen let through,
        # and then exits with code 1. Its own report is a full traceback on the terminal;
        # ours is one line (harness tui prints it) naming the log the traceback went to.
        if self.crash is None:
            self.crash = record(error)
        super()._handle_exception(error)
        self._exit_renderables.clear()

    # -- toasts ------------------------------------------------------------------------------
    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        self.call_after_refresh(self.make_room_for_toasts)

    def make_room_for_toasts(self) -> None:
        """Toasts stack up from the bottom right, over the detail pane: while they show,
        the pane ends above the highest of them (a bottom padding), so none of its lines
        is hidden behind one; it scrolls instead."""
        screen = self.screen
        panes = screen.query("#detail-pane")
        if not panes:
            return
        pane = panes.first()
        tops = [t.region.y for t in screen.query("Toast") if t.region.height]
        room = max(0, pane.region.bottom - min(tops)) if tops else 0
        if pane.styles.padding.bottom != room:
            pane.styles.padding = (0, 0, room, 0)

    # -- for screens -------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        self.io.submit(job)

    def enter_replay(self) -> None:
        if self.replay_screen is None:
            self.replay_screen = ReplayScreen()
            self.push_screen(self.replay_screen)
            self.io.replay("enter")

    def leave_replay(self) -> None:
        screen, self.replay_screen = self.replay_screen, None
        if screen is None:
            return
        self.io.leave_replay()
        # What was opened over it (help, the fork's prompt) closes with it: popping only
        # the top screen would leave replay open and no longer fed.
        while screen in self.screen_stack:
            self.pop_screen()

    def show_charts(self, num: int) -> None:
        """Every chart of todo ``num``, its runs overlaid (the store thread reads them)."""
        screen = ChartScreen(num)
        self.chart_screen = screen
        self.push_screen(screen, lambda _=None: self._charts_closed(screen))
        self.io.charts(num)

    def _charts_closed(self, screen: ChartScreen) -> None:
        if self.chart_screen is screen:
            self.chart_screen = None

    def _open_charts(self) -> ChartScreen | None:
        """The chart screen while it is on the stack: one that left it by any way (its
        own key, the palette, a pop) gets nothing more."""
        screen = self.chart_screen
        if screen is not None and screen not in self.screen_stack:
            self.chart_screen = screen = None
        return screen

    def show_help(self, actions: tuple[KeyAction, ...], title: str) -> None:
        keys = {a.id: a.keys for a in actions}
        keys.update(self._user_keymap)
        self.push_screen(HelpScreen(title, actions, keys))

    async def settled(self, timeout: float = 30.0) -> None:
        """Wait until everything asked of the store thread so far is done and shown
        (tests and the benchmark use this; a stuck thread is a TimeoutError, not a hang)."""
        async def done() -> None:
            while not self.board_screen.ready:  # it shows what came before it was mounted
                await asyncio.sleep(0.005)
            token = next(self._tokens)
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting[token] = future
            self.io.barrier(token)
            await future
        await asyncio.wait_for(done(), timeout)

    # -- from the store thread ---------------------------------------------------------------
    def on_board_refreshed(self, message: BoardRefreshed) -> None:
        self.last_refresh_poll = message.poll
        self.board_screen.show_board(message.view)

    def on_detail_refreshed(self, message: DetailRefreshed) -> None:
        self.board_screen.show_detail(message.view)

    def on_log_tailed(self, message: LogTailed) -> None:
        self.board_screen.show_log(message.update)

    def on_series_tailed(self, message: SeriesTailed) -> None:
        self.board_screen.show_series(message.update)
        charts = self._open_charts()
        if charts is not None:
            charts.add_points(message.update)

    def on_charts_loaded(self, message: ChartsLoaded) -> None:
        charts = self._open_charts()
        if charts is not None and message.view.todo is not None \
                and message.view.todo.num == charts.num:
            charts.show(message.view)

    def on_replay_loaded(self, message: ReplayLoaded) -> None:
        if self.replay_screen is not None:
            self.replay_screen.show(message.view)

    def on_write_done(self, message: WriteDone) -> None:
        self.notify(message.text, severity=message.severity, markup=False)  # type: ignore[arg-type]
        if message.session is not None:
            self.switch_session(message.session)
        if message.select is not None and self.board_screen.ready:
            self.board_screen.query_one(Board).select(message.select)

    def on_settled(self, message: Settled) -> None:
        future = self._waiting.pop(message.token, None)
        if future is not None and not future.done():
            future.set_result(None)

    def on_store_problem(self, message: StoreProblem) -> None:
        self.notify(message.text, severity=message.severity,  # type: ignore[arg-type]
                    timeout=10 if message.severity == "error" else 4, markup=False)

    def switch_session(self, session_id: int) -> None:
        """Show another session live (after "fork from here")."""
        self.session_id = session_id
        self.leave_replay()
        self.io.switch_session(session_id)

    # -- the command palette offers every key's action by name ----------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, ReplayScreen):
            actions = REPLAY_KEYS
        elif isinstance(screen, ChartScreen):
            actions = CHART_KEYS
        elif isinstance(screen, BoardScreen):
            actions = BOARD_KEYS
        else:
            return
        for a in actions:
            if a.id == "app.help":
                continue
            keys = self._user_keymap.get(a.id, a.keys)
            yield SystemCommand(a.help, f"{a.id}  ({keys})", self._runner(screen, a.action))

    @staticmethod
    def _runner(screen: Screen, action: str) -> Callable[[], object]:
        async def run() -> None:
            await screen.run_action(action)
        return run
