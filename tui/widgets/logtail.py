"""The live tail of the selected todo's current run."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Log, Static

from state.fold import RunState
from tui.text import line
from tui.views import LogUpdate

MAX_LINES = 2000


class LogTail(Widget):
    """A title (which run), the log's complete lines, and the line being written now
    (a progress bar that has not ended its line yet)."""

    DEFAULT_CSS = """
    LogTail { height: 1fr; }
    LogTail #log-title { height: 1; color: $text-muted; }
    LogTail Log { height: 1fr; background: $surface; }
    LogTail #log-partial { height: auto; max-height: 2; color: $text-warning; }
    """

    def compose(self) -> ComposeResult:
        yield Static(Text("No run yet.", style="dim"), id="log-title")
        yield Log(max_lines=MAX_LINES, auto_scroll=True)
        yield Static(id="log-partial")

    def tail(self, update: LogUpdate, run: RunState | None) -> None:
        log = self.query_one(Log)
        if update.reset:
            log.clear()
            title = Text()
            if run is None:
                title.append("No run yet.", style="dim")
            else:
                title.append(f"r{run.id} ", style="bold")
                title.append(run.state)
                title.append(" on ", style="dim")
                title.append_text(line(run.host, 20))
                if run.run_dir:
                    title.append("  ")
                    title.append_text(line(run.run_dir, 60, style="dim"))
            self.query_one("#log-title", Static).update(title)
        if update.lines:
            # Lines are already made safe on the store thread (tui.text.log_line); Log
            # shows them as plain text, never as markup.
            log.write_lines(update.lines)
        self.query_one("#log-partial", Static).update(Text(update.partial))

    def show_message(self, message: str) -> None:
        self.query_one(Log).clear()
        self.query_one("#log-title", Static).update(Text(message, style="dim"))
        self.query_one("#log-partial", Static).update("")
