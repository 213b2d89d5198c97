"""The line above the board: session, pipeline, progress, and what is running now."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from rich.text import Text
from textual.widgets import Static

from tui.text import line, run_duration
from tui.views import BoardView

BAR_WIDTH = 20


def progress_bar(done: int, total: int, width: int = BAR_WIDTH) -> Text:
    """``━━━━━━╸━━━━`` with the done part styled apart; an empty list shows an empty bar."""
    filled = (done * width * 2 // total) if total else 0  # in half cells
    full, half = divmod(filled, 2)
    bar = Text("━" * full, style="bold green")
    if half:
        bar.append("╸", style="bold green")
    bar.append("━" * (width - full - half), style="grey37")
    return bar


class SessionHeader(Static):
    """Session, pipeline, completed of total with a bar, and the running job(s)."""

    DEFAULT_CSS = """
    SessionHeader {
        height: 1;
        background: $panel;
        color: $foreground;
        padding: 0 1;
    }
    SessionHeader.-replay { background: $warning-muted; }
    """

    def show(self, view: BoardView, now: datetime) -> None:
        counts = Counter(t.status for t in view.todos.values())
        done, cancelled = counts["completed"], counts["cancelled"]
        total = len(view.todos) - cancelled  # cancelled work is not work left to do
        out = Text()
        if view.replay:
            out.append(" REPLAY ", style="bold reverse")
            out.append(" ")
        out.append("session ", style="dim")
        out.append_text(line(view.session_name, 32, style="bold"))
        out.append("  pipeline ", style="dim")
        out.append_text(line(view.pipeline or "—", 24))
        out.append("  ")
        out.append_text(progress_bar(done, total))
        out.append(f" {done}/{total} done", style="bold")
        if cancelled:
            out.append(f" ({cancelled} cancelled)", style="dim")
        out.append("  ")
        if view.running:
            run = view.running[0]
            out.append("▶ ", style="bold yellow")
            out.append(f"r{run.id} ")
            out.append_text(line(run.stage or (f"t{run.todo_id}" if run.todo_id else "job"), 20))
            out.append(" on ", style="dim")
            out.append_text(line(run.host, 20))
            elapsed = run_duration(run, now)
            if elapsed:
                out.append(f" {elapsed}", style="dim")
            if len(view.running) > 1:
                out.append(f" +{len(view.running) - 1} more", style="dim")
        else:
            out.append("idle", style="dim")
        self.set_class(view.replay, "-replay")
        self.update(out)
