"""The selected todo: full text, fields, runs, history; its log and verifications in tabs."""

from __future__ import annotations

from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static, TabbedContent, TabPane

from harness.charts.model import RunSeries, charts, main_metric
from harness.render import BADGE, GLYPH, claim_text, describe
from state.fold import Event, RunState
from tui.text import block, clock, line, run_duration
from tui.views import DetailView, LogUpdate, SeriesUpdate, current_run
from tui.widgets.chart import SeriesChart
from tui.widgets.logtail import LogTail
from tui.widgets.verification import VerificationPanel, latest_summary

RUN_GLYPH = {"queued": "…", "running": "▶", "succeeded": "✓", "failed": "✗", "cancelled": "⊘",
             "lost": "?"}
RUN_STYLE = {"running": "bold yellow", "succeeded": "green", "failed": "bold red",
             "lost": "bold red", "cancelled": "dim"}
STATUS_STYLE = {"in_progress": "bold yellow", "blocked": "bold red", "completed": "green",
                "cancelled": "dim"}
TABS = ("detail", "log", "verification")
WIDE_CAPTION = 50  # the chart's caption names its run from this width  # tab names; their panes are "tab-<name>"


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
    if t.claimed_by is not None:
        ran_out = (view.lease is not None and view.lease_clock is not None
                   and view.lease.left(view.lease_clock) <= 0)
        out.append("\n")
        out.append_text(line(claim_text(t, view.lease, view.lease_clock),
                             style="bold red" if ran_out else ""))
    if t.active_form:
        out.append("\nactive form: ", style="dim")
        out.append_text(line(t.active_form))
    return out


def runs_table(runs: tuple[RunState, ...], now: datetime, width: int = 100) -> Table:
    """Newest first; a narrow pane puts each run's reason on a line of its own."""
    narrow = width < 72
    table = Table.grid(padding=(0, 1))
    for _ in range(2 if narrow else 6):
        table.add_column(no_wrap=True)
    table.columns[-1].no_wrap = False
    for r in reversed(runs):
        code = "" if r.exit_code is None else f"exit {r.exit_code}"
        state = Text(f"{RUN_GLYPH.get(r.state, '?')} {r.state}",
                     style=RUN_STYLE.get(r.state, ""))
        why = line(r.reason, 160 if narrow else 60, style="red") if r.reason \
            else Text(f"attempt {r.attempt}", style="dim")
        if narrow:
            state.append("  ")
            state.append_text(line(r.host, 16))
            table.add_row(Text(f"r{r.id}", style="bold"), state)
            more = Text(" ".join(x for x in (run_duration(r, now), code) if x))
            if more.plain:
                more.append("  ")
            more.append_text(why)
            table.add_row(Text(""), more)
        else:
            table.add_row(Text(f"r{r.id}", style="bold"), state, line(r.host, 16),
                          Text(run_duration(r, now)), Text(code), why)
    return table


def brief(ev: Event) -> str | None:
    """What a person needs of an event; None for the runner's own bookkeeping (a job's
    key, host record, owner, pid, directory: `i` shows it). A run's change of state is
    kept, in a few words."""
    if ev.kind != "run.updated":
        return describe(ev)
    changes = ev.payload.get("changes", {})
    if "state" not in changes:
        return None
    state = changes["state"][1]
    text = f"run r{ev.payload.get('run')} {state}"
    if "pid" in changes and changes["pid"][1] is not None:
        text += f" (pid {changes['pid'][1]})"
    if "exit_code" in changes and changes["exit_code"][1] is not None:
        text += f", exit {changes['exit_code'][1]}"
    reason = changes.get("reason", [None, None])[1]
    if reason:
        text += f": {reason}"
    return text


def history_rows(events: tuple[Event, ...], internals: bool) -> list[tuple[Event, str]]:
    """Newest first, each with its description; the runner's bookkeeping only when asked."""
    rows = []
    for e in reversed(events):
        text = describe(e) if internals else brief(e)
        if text is not None:
            rows.append((e, text))
    return rows


def history_table(events: tuple[Event, ...], width: int, internals: bool = False) -> Table:
    """Newest first: what happened last matters most. A narrow pane puts what happened
    under who and when, so the description keeps a readable width."""
    rows = history_rows(events, internals)
    hidden = len(events) - len(rows)
    table = Table.grid(padding=(0, 1), expand=True)
    n_width = max((len(f"#{e.n}") for e in events), default=2)
    table.add_column(no_wrap=True, style="dim", width=n_width)
    if width < 72:
        table.add_column(ratio=1)
        for e, text in rows:
            who = Text(clock(e.ts)[5:16], style="dim")
            who.append("  ")
            who.append_text(line(e.actor, 24))
            table.add_row(Text(f"#{e.n}"), who)
            table.add_row(Text(""), Text(text))
    else:
        table.add_column(no_wrap=True, style="dim", width=11)
        table.add_column(no_wrap=True, max_width=14)
        table.add_column(ratio=1)
        for e, text in rows:
            table.add_row(Text(f"#{e.n}"), Text(clock(e.ts)[5:16]), line(e.actor, 14),
                          Text(text))
    if hidden:
        table.add_row(Text(""), Text(f"{hidden} runner event{'s' if hidden > 1 else ''} "
                                     "hidden (i shows them)", style="dim italic"))
    return table


class DetailPane(Widget):
    """Tabs for the selected todo: Detail, Log, Verification."""

    DEFAULT_CSS = """
    DetailPane { height: 1fr; }
    DetailPane TabbedContent { height: 1fr; }
    DetailPane TabPane { padding: 0 1; }
    DetailPane .detail-section { color: $text-accent; text-style: bold; margin-top: 1; }
    DetailPane #detail-text { margin-top: 1; }
    DetailPane #detail-chart { height: 10; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._view: DetailView | None = None
        self.internals = False  # the runner's bookkeeping in the history (key i)
        self.series = RunSeries(0, "")  # the followed run's points, for its main chart
        self._stage: str | None = None

    def compose(self) -> ComposeResult:
        with TabbedContent(initial="tab-detail"):
            with TabPane("Detail", id="tab-detail"), VerticalScroll(id="detail-scroll"):
                yield Static(id="detail-head")
                yield Static("Verification", classes="detail-section", id="check-title")
                yield Static(id="detail-check")
                yield Static(classes="detail-section", id="chart-title")
                yield SeriesChart(titled=False, id="detail-chart")
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
        self._show_history()

    def toggle_internals(self) -> bool:
        self.internals = not self.internals
        self._show_history()
        return self.internals

    def _show_history(self) -> None:
        if self._view is not None and self._view.todo is not None:
            self.query_one("#detail-history", Static).update(
                history_table(self._view.history, self.size.width, self.internals))

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
            self._show_check(None)
        else:
            q("#detail-head", Static).update(head(view))
            # The newest verdict and its gate come first: they decide the todo's status.
            self._show_check(latest_summary(view.verifications))
            q("#detail-text", Static).update(block(view.todo.content))
            q("#runs-title", Static).update(f"Runs ({len(view.runs)})")
            q("#detail-runs", Static).update(runs_table(view.runs, now, self.size.width)
                                             if view.runs else Text("none", style="dim"))
            self._show_history()
        tabs.get_tab("tab-verification").label = (f"Verification ({len(view.verifications)})"
                                              if view.verifications else "Verification")
        self.query_one(VerificationPanel).show(view.verifications, view.comparisons)
        log = self.query_one(LogTail)
        if not view.live:
            log.show_message("Logs are shown live only; leave replay (esc) to follow them.")
        run = current_run(view)
        if view.todo is None or not view.live or run is None or run.id != self.series.run_id:
            self.series = RunSeries(0, "")  # another run's points come next, if it has any
        self._show_chart(run)

    def _show_check(self, summary: Table | None) -> None:
        self.query_one("#check-title").display = summary is not None
        self.query_one("#detail-check", Static).display = summary is not None
        self.query_one("#detail-check", Static).update(summary or "")

    def tail(self, update: LogUpdate, run: RunState | None) -> None:
        self.query_one(LogTail).tail(update, run)

    def add_points(self, update: SeriesUpdate, run: RunState | None) -> None:
        """New points of the followed run: its main chart follows them (live)."""
        if update.reset or update.run_id != self.series.run_id:
            self.series = RunSeries(update.run_id or 0, f"r{update.run_id}", update.points)
            self._stage = update.stage
        else:
            self.series = RunSeries(self.series.run_id, self.series.label,
                                    self.series.points + update.points)
        self._show_chart(run)

    def _show_chart(self, run: RunState | None) -> None:
        live = self._view is None or self._view.live
        metric = main_metric(self.series, self._stage) if live else None
        shown = charts([self.series], [metric]) if metric else []
        title = self.query_one("#chart-title", Static)
        chart = self.query_one("#detail-chart", SeriesChart)
        title.display = chart.display = bool(shown)
        if not shown:
            chart.show(None)
            return
        caption = Text(shown[0].title, style="bold")
        if self.size.width >= WIDE_CAPTION:  # a narrow pane keeps the key to the rest
            state = run.state if run is not None and run.id == self.series.run_id else ""
            caption.append(f"  r{self.series.run_id}{' ' + state if state else ''}",
                           style="dim")
        if len(self.series.metrics) > 1:
            caption.append(f"  c: all {len(self.series.metrics)}", style="dim italic")
        title.update(caption)
        chart.show(shown[0])

    def switch(self, tab: str) -> None:
        if tab in TABS:
            self.query_one(TabbedContent).active = f"tab-{tab}"

    @property
    def active(self) -> str:
        """The tab shown: detail, log or verification."""
        return self.query_one(TabbedContent).active.removeprefix("tab-")


