"""Charts of a run's series (:mod:`harness.charts`) in the TUI: a textual-plotext widget
that follows the app's theme, and the same drawing as Rich text where a widget cannot go
(beside a table inside the verification report)."""

from __future__ import annotations

from rich.text import Text
from textual_plotext import Plot, PlotextPlot

from harness.charts.model import Chart
from harness.charts.terminal import MIN_LEGEND_WIDTH, draw


class SeriesChart(PlotextPlot):
    """One chart; ``show`` another (or None for an empty one). The title is drawn inside
    unless ``titled`` is False (a caption above says it)."""

    DEFAULT_CSS = """
    SeriesChart { width: 1fr; height: 12; }
    """

    def __init__(self, *, titled: bool = True, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.titled = titled
        self.chart: Chart | None = None

    def show(self, chart: Chart | None) -> None:
        self.chart = chart
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_figure()
        if self.chart is not None:
            draw(plt, self.chart, title=self.titled,
                 legend=(self.size.width or 80) >= MIN_LEGEND_WIDTH)
        self.refresh()

    def on_resize(self) -> None:
        self._draw()  # whether the legend fits depends on the width


def chart_text(chart: Chart, width: int, height: int) -> Text:
    """``chart`` drawn into Rich text of ``width`` x ``height`` cells."""
    plt = Plot()
    plt.theme("pro")  # the terminal's own colours behind the lines
    plt.plotsize(width, height)
    draw(plt, chart, legend=width >= MIN_LEGEND_WIDTH)
    return Text.from_ansi(plt.build(), no_wrap=True)


__all__ = ["SeriesChart", "chart_text"]
