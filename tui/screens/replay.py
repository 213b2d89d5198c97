"""Replay: the session as it was at event N, read-only, stepped through on a timeline."""

from __future__ import annotations

from typing import cast

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer

from harness.render import safe_line
from tui import changes
from tui.host import ScreenHost
from tui.keys import REPLAY_KEYS, bindings
from tui.screens.prompt import PromptScreen
from tui.views import ReplayView
from tui.widgets.board import Board
from tui.widgets.detail import DetailPane
from tui.widgets.header import SessionHeader
from tui.widgets.timeline import Timeline


class ReplayScreen(Screen[None]):
    """No binding here changes the store; forking writes a new session, not this one."""

    BINDINGS = bindings(REPLAY_KEYS)

    def __init__(self) -> None:
        super().__init__()
        self._ready = False
        self.view: ReplayView | None = None

    @property
    def harness(self) -> ScreenHost:
        return cast("ScreenHost", self.app)

    def compose(self) -> ComposeResult:
        yield SessionHeader()
        with Horizontal(id="main"):
            yield Board(id="board")
            yield DetailPane(id="detail-pane")
        yield Timeline()
        yield Footer()

    def on_mount(self) -> None:
        # is_mounted turns true only after this handler; the widgets exist already.
        self._ready = True
        self.query_one(Board).focus()
        if self.view is not None:
            self.show(self.view)

    def on_unmount(self) -> None:
        self._ready = False  # a view that arrives after leaving is not drawn

    def show(self, view: ReplayView) -> None:
        self.view = view
        if not self._ready:
            return
        with self.app.batch_update():
            # Who held what then (no lease times: those are live, not history).
            self.query_one(Board).show(view.board.todos, view.board.figures,
                                       view.board.claims(0.0))
            self.query_one(SessionHeader).show(view.board, self.harness.clock())
            self.query_one(DetailPane).show(view.detail, self.harness.clock())
            self.query_one(Timeline).show(view)

    @on(Board.Selected)
    def _selected_changed(self, event: Board.Selected) -> None:
        if self.view is not None and event.todo_id != (
                self.view.detail.todo.num if self.view.detail.todo else None):
            self.harness.io.replay("select", event.todo_id)

    def action_step(self, delta: int) -> None:
        self.harness.io.replay("step", delta)

    def action_goto_first(self) -> None:
        self.harness.io.replay("goto", 1)

    def action_goto_last(self) -> None:
        self.harness.io.replay("last")

    def action_jump(self, direction: int) -> None:
        self.harness.io.replay("jump", direction)

    def action_fork(self) -> None:
        if self.view is None:
            return
        n = self.view.n
        name = f"{self.view.board.session_name}-at-{n}"
        store, sid = self.harness.store, self.harness.session_id

        def forked(new_name: str | None) -> None:
            if new_name:
                self.harness.submit(changes.fork(store, sid, new_name, n))
        self.app.push_screen(PromptScreen(
            f"Fork a new session from event {n} of {safe_line(self.view.board.session_name, 40)}",
            value=name, note="The new session starts as this one was here; this one is kept."),
            forked)

    def action_leave(self) -> None:
        self.harness.leave_replay()

    def action_tab(self, name: str) -> None:
        self.query_one(DetailPane).switch(name)

    def action_toggle_internals(self) -> None:
        self.query_one(DetailPane).toggle_internals()

    def action_help(self) -> None:
        self.harness.show_help(REPLAY_KEYS, "Replay (read-only)")
