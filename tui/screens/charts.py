"""Every chart of one todo: each metric its stage recorded, with all of the todo's runs
that recorded it overlaid (an earlier attempt beside the one running now), live."""

from __future__ import annotations

from typing import cast

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from harness.charts.model import RunSeries, charts, main_metric
from harness.render import safe_line
from tui.host import ScreenHost
from tui.keys import CHART_KEYS, bindings
from tui.views import ChartsView, SeriesUpdate
from tui.widgets.chart import SeriesChart

WIDE = 110  # from this many columns, two charts side by side


class ChartScreen(Screen[None]):
    BINDINGS = bindings(CHART_KEYS)
    DEFAULT_CSS = """
    ChartScreen #charts-head { height: auto; padding: 0 1; background: $boost; }
    ChartScreen #charts { height: 1fr; }
    ChartScreen #charts-grid {
        grid-size: 1; grid-rows: 15; grid-gutter: 1 2; height: auto; padding: 0 1;
    }
    ChartScreen #charts-grid.wide { grid-size: 2; }
    ChartScreen SeriesChart { height: 15; }
    ChartScreen #charts-empty { padding: 1 2; color: $text-muted; }
    """

    def __init__(self, num: int) -> None:
        super().__init__()
        self.num = num
        self.view: ChartsView | None = None
        self.runs: list[RunSeries] = []
        self._shown: list[str] = []  # the metrics charted, in order
        # Between mount and unmount only: what arrives before is kept for on_mount, and
        # what arrives after (the store thread does not know the screen closed) is dropped.
        # (Textual's is_mounted stays true once a screen has been removed.)
        self._ready = False

    @property
    def harness(self) -> ScreenHost:
        return cast("ScreenHost", self.app)

    def compose(self) -> ComposeResult:
        yield Static(Text(f"t{self.num}: loading its charts…"), id="charts-head")
        with VerticalScroll(id="charts"):
            yield Static(id="charts-empty")
            yield Grid(id="charts-grid")
        yield Footer()

    def on_mount(self) -> None:
        self._ready = True
        self.query_one("#charts").focus()
        self._layout()
        if self.view is not None:
            self.show(self.view)

    def on_unmount(self) -> None:
        self._ready = False

    def on_resize(self) -> None:
        if self._ready:
            self._layout()

    def _layout(self) -> None:
        self.query_one("#charts-grid").set_class(self.size.width >= WIDE, "wide")

    def show(self, view: ChartsView) -> None:
        self.view = view
        self.runs = list(view.runs)
        if self._ready:
            self._draw()

    def add_points(self, update: SeriesUpdate) -> None:
        """Points the running job just recorded (the detail pane follows its todo's
        current run, which is this todo's while this screen is open)."""
        if self.view is None or update.run_id is None or not update.points:
            return
        for i, run in enumerate(self.runs):
            if run.run_id == update.run_id:
                known = {p.start for p in run.points}
                new = tuple(p for p in update.points if p.start not in known)
                self.runs[i] = RunSeries(run.run_id, run.label, run.points + new)
                break
        else:
            self.runs.append(RunSeries(update.run_id, f"r{update.run_id}", update.points))
        if self._ready:
            self._draw()

    def _draw(self) -> None:
        view = self.view
        assert view is not None
        head = Text()
        if view.todo is not None:
            head.append(f"{view.todo.id}  ", style="bold")
            head.append(safe_line(view.todo.content, 100))
        with_points = [r for r in self.runs if r.points]
        head.append("\n")
        if with_points:
            head.append(f"{len(with_points)} run{'s' if len(with_points) > 1 else ''} "
                        "overlaid: " + ", ".join(r.label for r in with_points), style="dim")
        self.query_one("#charts-head", Static).update(head)
        drawn = charts(with_points)
        first = main_metric(with_points[-1], view.stage) if with_points else None
        drawn.sort(key=lambda c: c.metric != first)  # the main chart first
        empty = self.query_one("#charts-empty", Static)
        empty.display = not drawn
        empty.update("No series recorded for this todo yet: a stage records them while it "
                     "runs (docs/pipelines.md, \"Series\")." if not drawn else "")
        grid = self.query_one("#charts-grid", Grid)
        metrics = [c.metric for c in drawn]
        if metrics != self._shown:
            grid.remove_children()
            grid.mount_all(SeriesChart(id=f"chart-{i}") for i in range(len(drawn)))
            self._shown = metrics
        for i, chart in enumerate(drawn):
            # mounted widgets appear on the next refresh; show() keeps the chart till then
            self.query_one(f"#chart-{i}", SeriesChart).show(chart)

    def action_close(self) -> None:
        self.dismiss()  # the app's callback stops sending this screen the series

    def action_help(self) -> None:
        self.harness.show_help(CHART_KEYS, "Charts")
