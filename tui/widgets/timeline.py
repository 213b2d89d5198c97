"""Replay's timeline: event N of M, its time, actor and what it did."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from harness.render import describe
from tui.text import clock, line
from tui.views import ReplayView

BAR_WIDTH = 40


class Timeline(Static):
    DEFAULT_CSS = """
    Timeline {
        height: 2;
        dock: bottom;
        background: $warning-muted;
        color: $foreground;
        padding: 0 1;
    }
    """

    def show(self, view: ReplayView) -> None:
        out = Text()
        out.append(f"event {view.n} of {view.total}", style="bold")
        ev = view.event
        if ev is not None:
            out.append("  ")
            out.append(clock(ev.ts))
            out.append("  ")
            out.append_text(line(ev.actor, 24, style="bold"))
            out.append("  ")
            if ev.todo_id is not None:
                out.append(f"t{ev.todo_id} ", style="bold")
            out.append_text(line(describe(ev), 120))
        out.append("\n")
        filled = round(view.n / view.total * BAR_WIDTH) if view.total else 0
        out.append("━" * filled, style="bold yellow")
        out.append("━" * (BAR_WIDTH - filled), style="grey37")
        out.append("  read-only: the session as it was after this event", style="dim")
        self.update(out)
