"""Messages the store thread posts to the app (``post_message`` is thread-safe)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from tui.views import BoardView, ChartsView, DetailView, LogUpdate, ReplayView, SeriesUpdate


@dataclass
class BoardRefreshed(Message):
    """The live board changed (or was loaded). ``poll`` counts the store thread's polls."""

    view: BoardView
    poll: int


@dataclass
class DetailRefreshed(Message):
    view: DetailView


@dataclass
class LogTailed(Message):
    update: LogUpdate


@dataclass
class SeriesTailed(Message):
    update: SeriesUpdate


@dataclass
class ChartsLoaded(Message):
    view: ChartsView


@dataclass
class ReplayLoaded(Message):
    view: ReplayView


@dataclass
class WriteDone(Message):
    """A change finished. ``select`` asks the board to move to a todo (after an add);
    ``session`` switches the app to another session (after a fork)."""

    text: str
    severity: str = "information"
    select: int | None = None
    session: int | None = None


@dataclass
class Settled(Message):
    """Everything asked of the store thread before barrier ``token`` is done and shown."""

    token: int


@dataclass
class StoreProblem(Message):
    text: str
    severity: str = "error"  # "information": the store is back
