"""What the screens ask of the app that hosts them: :class:`ScreenHost`.

The app (:class:`tui.app.HarnessApp`) builds the screens, so they know it only as this
protocol: the store and session they show, the clock, the store I/O that sends them data,
and the few requests they make (run a job, switch mode, show help).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from state.store import Store
from tui.keys import KeyAction
from tui.store_io import Job, StoreIO

__all__ = ["ScreenHost"]


class ScreenHost(Protocol):
    store: Store
    session_id: int
    clock: Callable[[], datetime]
    io: StoreIO

    def submit(self, job: Job) -> None: ...

    def enter_replay(self) -> None: ...

    def leave_replay(self) -> None: ...

    def show_charts(self, num: int) -> None: ...

    def show_help(self, actions: tuple[KeyAction, ...], title: str) -> None: ...
