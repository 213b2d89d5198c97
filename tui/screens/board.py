"""The live screen: header, board, detail pane; every change goes through harness.todos."""

from __future__ import annotations

import time
from typing import cast

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer

from harness.render import safe_line
from tui import changes
from tui.host import ScreenHost
from tui.keys import BOARD_KEYS, bindings
from tui.screens.prompt import PromptScreen
from tui.views import BoardView, DetailView, LogUpdate, SeriesUpdate, current_run
from tui.widgets.board import Board
from tui.widgets.detail import DetailPane
from tui.widgets.header import SessionHeader


class BoardScreen(Screen[None]):
    BINDINGS = bindings(BOARD_KEYS)

    def __init__(self) -> None:
        super().__init__()
        self._ready = False
        self.board_view: BoardView | None = None
        self.detail_view: DetailView | None = None
        self._early_logs: list[LogUpdate] = []
        self._early_series: list[SeriesUpdate] = []

    @property
    def ready(self) -> bool:
        """Mounted, with everything sent before that shown."""
        return self._ready

    @property
    def harness(self) -> ScreenHost:
        return cast("ScreenHost", self.app)

    def compose(self) -> ComposeResult:
        yield SessionHeader()
        with Horizontal(id="main"):
            yield Board(id="board")
            yield DetailPane(id="detail-pane")
        yield Footer()

    def on_mount(self) -> None:
        # is_mounted turns true only after this handler; the widgets exist already.
        self._ready = True
        self.query_one(Board).focus()
        # What the store thread sent before the widgets existed (it starts with the app,
        # so the first read overlaps Textual's own start-up).
        if self.board_view is not None:
            self.show_board(self.board_view)
        if self.detail_view is not None:
            self.show_detail(self.detail_view)
        for update in self._early_logs:
            self.show_log(update)
        self._early_logs.clear()
        for points in self._early_series:
            self.show_series(points)
        self._early_series.clear()
        self.set_interval(1.0, self.tick)

    def on_unmount(self) -> None:
        self._ready = False  # as the app ends: what the store thread still sends is dropped

    # -- fed by the app --------------------------------------------------------------------
    def show_board(self, view: BoardView) -> None:
        previous, self.board_view = self.board_view, view
        if not self._ready:
            return
        board = self.query_one(Board)
        if previous is not None and previous.session_id != view.session_id:
            board.show({})  # another session (after a fork): start from the top
        with self.app.batch_update():
            board.show(view.todos, view.figures, view.claims(time.monotonic()))
            self.query_one(SessionHeader).show(view, self.harness.clock())

    def show_detail(self, view: DetailView) -> None:
        self.detail_view = view
        if self._ready:
            self.query_one(DetailPane).show(view, self.harness.clock())

    def show_log(self, update: LogUpdate) -> None:
        if not self._ready:
            self._early_logs.append(update)
            return
        run = current_run(self.detail_view) if self.detail_view else None
        self.query_one(DetailPane).tail(update, run)

    def show_series(self, update: SeriesUpdate) -> None:
        if not self._ready:
            self._early_series.append(update)
            return
        run = current_run(self.detail_view) if self.detail_view else None
        self.query_one(DetailPane).add_points(update, run)

    def tick(self) -> None:
        """Running durations and the time left on leases move on even when nothing is
        written."""
        if self.board_view is not None and self.board_view.running:
            for header in self.query(SessionHeader):  # none while the app shuts down
                header.show(self.board_view, self.harness.clock())
        if self.board_view is not None and self.board_view.leases:
            for board in self.query(Board):
                board.show_claims(self.board_view.claims(time.monotonic()))

    @on(Board.Selected)
    def _selected_changed(self, event: Board.Selected) -> None:
        self.harness.io.select(event.todo_id)

    # -- actions -----------------------------------------------------------------------------
    def _target(self) -> int | None:
        num = self.query_one(Board).selected
        if num is None:
            self.notify("No todo selected.", severity="warning", markup=False)
        return num

    def _status(self, status: str) -> None:
        num = self._target()
        if num is not None:
            self.harness.submit(changes.set_status(self.harness.store, self.harness.session_id,
                                                   num, status))

    def action_start(self) -> None:
        self._status("in_progress")

    def action_done(self) -> None:
        self._status("completed")

    def action_cancel(self) -> None:
        self._status("cancelled")

    def action_block(self) -> None:
        num = self._target()
        if num is None:
            return
        store, sid = self.harness.store, self.harness.session_id

        def blocked(reason: str | None) -> None:
            if reason:
                self.harness.submit(changes.set_status(store, sid, num, "blocked",
                                                       reason=reason))
        self.app.push_screen(PromptScreen(f"Block t{num}: why is it blocked?",
                                          placeholder="the reason, shown on the board"),
                             blocked)

    def action_unblock(self) -> None:
        num = self._target()
        if num is not None:
            self.harness.submit(changes.unblock(self.harness.store, self.harness.session_id,
                                                num))

    def action_priority_up(self) -> None:
        self._priority("up")

    def action_priority_down(self) -> None:
        self._priority("down")

    def _priority(self, direction: str) -> None:
        num = self._target()
        if num is not None:
            self.harness.submit(changes.set_priority(self.harness.store,
                                                     self.harness.session_id, num, direction))

    def action_move_up(self) -> None:
        self._move(up=True)

    def action_move_down(self) -> None:
        self._move(up=False)

    def _move(self, *, up: bool) -> None:
        num = self._target()
        if num is not None:
            self.harness.submit(changes.move(self.harness.store, self.harness.session_id, num,
                                             up=up))

    def action_add(self) -> None:
        store, sid = self.harness.store, self.harness.session_id

        def added(text: str | None) -> None:
            if text:
                self.harness.submit(changes.add(store, sid, text))
        self.app.push_screen(PromptScreen("Add a todo", placeholder="what needs doing"), added)

    def action_edit(self) -> None:
        num = self._target()
        todo = self.query_one(Board).todo(num) if num is not None else None
        if todo is None:
            return
        store, sid = self.harness.store, self.harness.session_id
        # The input shows text as typed; text holding newlines or control characters is
        # shown made safe, and saving it keeps what the input shows.
        shown = safe_line(todo.content)
        note = "" if shown == todo.content else (
            "This text has newlines or control characters: they are shown escaped "
            "(⏎, \\x1b) and saved as shown.")

        def edited(text: str | None) -> None:
            if text and text != shown:
                self.harness.submit(changes.edit(store, sid, num, text))
        self.app.push_screen(PromptScreen(f"Edit t{num}", value=shown, note=note), edited)

    def action_note(self) -> None:
        num = self._target()
        if num is None:
            return
        store, sid = self.harness.store, self.harness.session_id

        def noted(text: str | None) -> None:
            if text:
                self.harness.submit(changes.note(store, sid, num, text))
        self.app.push_screen(PromptScreen(f"Note on t{num}", placeholder="kept in its history"),
                             noted)

    def action_replay(self) -> None:
        self.harness.enter_replay()

    def action_charts(self) -> None:
        num = self._target()
        if num is not None:
            self.harness.show_charts(num)

    def action_tab(self, name: str) -> None:
        self.query_one(DetailPane).switch(name)

    def action_toggle_internals(self) -> None:
        shown = self.query_one(DetailPane).toggle_internals()
        self.notify("History: runner events shown" if shown else
                    "History: runner events hidden", markup=False)

    def action_help(self) -> None:
        self.harness.show_help(BOARD_KEYS, "The live board")
