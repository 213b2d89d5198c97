"""The selected todo: full text, fields, runs, history; its log and verifications in tabs."""

from __future__ import annotations

from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static, TabbedContent, TabPane

from harness.render import BADGE, GLYPH, describe
from state.fold import Event, RunState
from tui.text import block, clock, line, run_duration
from tui.views import DetailView, LogUpdate
from tui.widgets.logtail import LogTail
from tui.widgets.verification import VerificationPanel

RUN_GLYPH = {"queued": "…", "running": "▶", "succeeded": "✓", "failed": "✗", "cancelled": "⊘",
             "lost": "?"}
RUN_STYLE = {"running": "bold yellow", "succeeded": "green", "failed": "bold red",
             "lost": "bold red", "cancelled": "dim"}
STATUS_STYLE = {"in_progress": "bold yellow", "blocked": "bold red", "completed": "green",
                "cancelled": "dim"}
TABS = ("detail", "log", "verification")  # tab names; their panes are "tab-<name>"


def head(view: DetailView) -> Text:
    t = view.todo
    assert t is not None
    out = Text()
    out.append(f"{t.id}  ", style="bold")
    out.append(f"{GLYPH.get(t.status, '?')} {t.status.replace('_', ' ')}",
               style=STATUS_STYLE.get(t.status, ""))
    out.append("   priority ", style="dim")
    out.append(BADGE.get(t.priority, "?"), style="bold")
    out.append("   origin ", style="dim")
    out.append(t.origin)
    if t.stage:
        out.append("   stage ", style="dim")
        out.append_text(line(t.stage, 30))
    if t.depends_on:
        out.append("\ndepends on ", style="dim")
        out.append(", ".join(f"t{d}" for d in t.depends_on))
        if view.waiting_on:
            out.append("  waiting on " + ", ".join(f"t{d}" for d in view.waiting_on),
                       style="italic yellow")
    if t.status == "blocked":
        out.append("\nblocked: ", style="bold red")
        out.append_text(block(t.blocked_reason or "(no reason given)", style="red"))
    if t.active_form:
        out.append("\nactive form: ", style="dim")
        out.append_text(line(t.active_form))
    return out


def runs_table(runs: tuple[RunState, ...], now: datetime) -> Table:
    table = Table.grid(padding=(0, 1))
    for _ in range(6):
        table.add_column(no_wrap=True)
    table.columns[5].no_wrap = False
    for r in reversed(runs):
        code = "" if r.exit_code is None else f"exit {r.exit_code}"
        table.add_row(Text(f"r{r.id}", style="bold"),
                      Text(f"{RUN_GLYPH.get(r.state, '?')} {r.state}",
                           style=RUN_STYLE.get(r.state, "")),
                      line(r.host, 16), Text(run_duration(r, now)), Text(code),
                      line(r.reason, 60, style="red") if r.reason
                      else Text(f"attempt {r.attempt}", style="dim"))
    return table


def history_table(events: tuple[Event, ...], width: int) -> Table:
    """Newest first: what happened last matters most. A narrow pane puts what happened
    under who and when, so the description keeps a readable width."""
    table = Table.grid(padding=(0, 1), expand=True)
    n_width = max((len(f"#{e.n}") for e in events), default=2)
    table.add_column(no_wrap=True, style="dim", width=n_width)
    if width < 72:
        table.add_column(ratio=1)
        for e in reversed(events):
            who = Text(clock(e.ts)[5:16], style="dim")
            who.append("  ")
            who.append_text(line(e.actor, 24))
            table.add_row(Text(f"#{e.n}"), who)
            table.add_row(Text(""), Text(describe(e)))
        return table
    table.add_column(no_wrap=True, style="dim", width=11)
    table.add_column(no_wrap=True, max_width=14)
    table.add_column(ratio=1)
    for e in reversed(events):
        table.add_row(Text(f"#{e.n}"), Text(clock(e.ts)[5:16]), line(e.actor, 14),
                      Text(describe(e)))
    return table


class DetailPane(Widget):
    """Tabs for the selected todo: Detail, Log, Verification."""

    DEFAULT_CSS = """
    DetailPane { height: 1fr; }
    DetailPane TabbedContent { height: 1fr; }
    DetailPane TabPane { padding: 0 1; }
    DetailPane .detail-section { color: $text-accent; text-style: bold; margin-top: 1; }
    DetailPane #detail-text { margin-top: 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._view: DetailView | None = None

    def compose(self) -> ComposeResult:
        with TabbedContent(initial="tab-detail"):
            with TabPane("Detail", id="tab-detail"), VerticalScroll(id="detail-scroll"):
                yield Static(id="detail-head")
                yield Static(id="detail-text")
                yield Static("Runs", classes="detail-section", id="runs-title")
                yield Static(id="detail-runs")
                yield Static("History", classes="detail-section")
                yield Static(id="detail-history")
            with TabPane("Log", id="tab-log"):
                yield LogTail()
            with TabPane("Verification", id="tab-verification"):
                yield VerificationPanel()

    def on_resize(self) -> None:
        # The history's layout depends on the width (see history_table).
        if self._view is not None and self._view.todo is not None:
            self.query_one("#detail-history", Static).update(
                history_table(self._view.history, self.size.width))

    def show(self, view: DetailView, now: datetime) -> None:
        self._view = view
        q = self.query_one
        tabs = self.query_one(TabbedContent)
        if view.todo is None:
            q("#detail-head", Static).update(Text("No todo selected.", style="dim"))
            q("#detail-text", Static).update(Text("? lists the keys; ctrl+p every action.",
                                                  style="dim") if view.live else "")
            for name in ("#detail-runs", "#detail-history"):
                q(name, Static).update("")
        else:
            q("#detail-head", Static).update(head(view))
            q("#detail-text", Static).update(block(view.todo.content))
            q("#runs-title", Static).update(f"Runs ({len(view.runs)})")
            q("#detail-runs", Static).update(runs_table(view.runs, now) if view.runs
                                             else Text("none", style="dim"))
            q("#detail-history", Static).update(history_table(view.history, self.size.width))
        tabs.get_tab("tab-verification").label = (f"Verification ({len(view.verifications)})"
                                              if view.verifications else "Verification")
        self.query_one(VerificationPanel).show(view.verifications)
        log = self.query_one(LogTail)
        if not view.live:
            log.show_message("Logs are shown live only; leave replay (esc) to follow them.")

    def tail(self, update: LogUpdate, run: RunState | None) -> None:
        self.query_one(LogTail).tail(update, run)

    def switch(self, tab: str) -> None:
        if tab in TABS:
            self.query_one(TabbedContent).active = f"tab-{tab}"

    @property
    def active(self) -> str:
        """The tab shown: detail, log or verification."""
        return self.query_one(TabbedContent).active.removeprefix("tab-")


