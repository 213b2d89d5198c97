"""The live tail of the selected todo's current run.

Long lines wrap at the pane's width (a log line is mostly read to its end: a path, an
error, a figure at the end of a progress line), and wrap again when the pane is resized:
the tail keeps the lines as text and lays them out anew.
"""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import RichLog, Static

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
    LogTail RichLog { height: 1fr; background: $surface; overflow-x: hidden; }
    LogTail #log-partial { height: auto; max-height: 2; color: $text-warning; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.lines: deque[str] = deque(maxlen=MAX_LINES)  # the complete lines, unwrapped
        self._laid_out_at = 0  # the width the shown lines were wrapped at

    def compose(self) -> ComposeResult:
        yield Static(Text("No run yet.", style="dim"), id="log-title")
        # Its limit counts wrapped rows: room for MAX_LINES lines of a few rows each.
        yield RichLog(wrap=True, min_width=1, auto_scroll=True, max_lines=4 * MAX_LINES)
        yield Static(id="log-partial")

    def _write(self, log: RichLog, lines: list[str]) -> None:
        for text in lines:
            log.write(Text(text))  # Text: shown as it is, never read as markup

    def on_resize(self, event: events.Resize) -> None:
        log = self.query_one(RichLog)
        width = log.scrollable_content_region.width
        if width and width != self._laid_out_at and self.lines:
            log.clear()
            self._write(log, list(self.lines))
        self._laid_out_at = width

    def tail(self, update: LogUpdate, run: RunState | None) -> None:
        log = self.query_one(RichLog)
        if update.reset:
            log.clear()
            self.lines.clear()
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
            # Lines are already made safe on the store thread (tui.text.log_line).
            self.lines.extend(update.lines)
            self._write(log, list(update.lines)[-MAX_LINES:])
            self._laid_out_at = log.scrollable_content_region.width
        self.query_one("#log-partial", Static).update(Text(update.partial))

    def show_message(self, message: str) -> None:
        self.query_one(RichLog).clear()
        self.lines.clear()
        self.query_one("#log-title", Static).update(Text(message, style="dim"))
        self.query_one("#log-partial", Static).update("")
