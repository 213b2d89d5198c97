"""What a chart shows, built from stored points (:class:`state.series.SeriesPoint`) and
drawn by whichever picture needs it: the terminal (:mod:`.terminal`), the TUI, an SVG
(:mod:`.svg`).

One chart per metric; one line per run and label set (``heldout_acc`` has one line per
position; ``--compare`` adds another run's). A metric whose x values are names (τ per
checkpoint) is categorical: drawn as bars, its names in the order they first came.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from pipeline.series import is_series
from pipeline.served_gates import measured_levels
from state.series import SeriesPoint, XValue

LOG_X_RATIO = 8  # a log x axis spans at least this factor,
LOG_X_GROWTH = 1.8  # each value at least this many times the one before
MAX_LOG_TICKS = 12
# The chart a stage's todo shows first, when it recorded it; else its first metric.
MAIN_METRIC: Mapping[str, str] = {
    "train": "loss", "verify": "tau", "benchmark": "speedup", "hidden_states": "tokens_per_s"}


@dataclass(frozen=True)
class Line:
    """One line of a chart: its name in the legend, and its points in order of x (the
    order they came, for names)."""

    name: str
    run_id: int
    xs: tuple[XValue, ...]
    ys: tuple[float | None, ...]
    lo: tuple[float | None, ...] = ()
    hi: tuple[float | None, ...] = ()

    @property
    def has_spread(self) -> bool:
        return any(v is not None for v in (*self.lo, *self.hi))

    @property
    def last(self) -> float | None:
        return next((y for y in reversed(self.ys) if y is not None), None)


@dataclass(frozen=True)
class Chart:
    metric: str
    axis: str
    lines: tuple[Line, ...]
    #: the names on a categorical axis, in order (empty for a numeric one)
    categories: tuple[str, ...] = ()

    @property
    def categorical(self) -> bool:
        return bool(self.categories)

    @property
    def title(self) -> str:
        return f"{self.metric} by {self.axis}"

    @property
    def points(self) -> int:
        return sum(len(line.xs) for line in self.lines)

    @property
    def log_x(self) -> bool:
        """A few x values that grow by a factor (concurrency 1, 4, 16, 64) are read on a
        log axis; training steps, evenly spaced, are not."""
        xs = sorted({float(x) for line in self.lines for x in line.xs
                     if not isinstance(x, str)})
        if len(xs) < 2 or xs[0] <= 0 or len(xs) > MAX_LOG_TICKS:
            return False
        growth = min(b / a for a, b in pairwise(xs))
        return growth >= LOG_X_GROWTH and xs[-1] / xs[0] > LOG_X_RATIO


@dataclass(frozen=True)
class RunSeries:
    """The points of one run, and the name its lines carry beside others' (``r12``)."""

    run_id: int
    label: str
    points: tuple[SeriesPoint, ...] = field(default=())

    @property
    def metrics(self) -> list[str]:
        """Its metrics in the order it first recorded them."""
        return list(dict.fromkeys(p.metric for p in self.points))


def label_text(labels: Mapping[str, Any]) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(labels.items()))


def main_metric(run: RunSeries, stage: str | None) -> str | None:
    """The metric a stage's todo shows first: the stage's usual one, else its first."""
    metrics = run.metrics
    if not metrics:
        return None
    preferred = MAIN_METRIC.get(stage or "")
    return preferred if preferred in metrics else metrics[0]


def charts(runs: Sequence[RunSeries], metrics: Iterable[str] = ()) -> list[Chart]:
    """One chart per metric (those named, else every one, in the order first recorded),
    with a line per run and label set. Names carry the run only when there are several."""
    wanted = list(metrics) or list(dict.fromkeys(m for r in runs for m in r.metrics))
    several = len([r for r in runs if r.points]) > 1
    out = []
    for metric in wanted:
        lines: list[Line] = []
        axis = ""
        for run in runs:
            groups: dict[str, dict[str, Any]] = {}
            for p in run.points:
                if p.metric != metric:
                    continue
                axis = axis or p.axis
                key = label_text(p.labels)
                g = groups.setdefault(key, {})
                g[_key(p.x)] = p  # a point recorded again at the same x: the last counts
            for key, by_x in groups.items():
                name = " ".join(x for x in (run.label if several else "", key) if x) \
                    or metric
                lines.append(_line(name, run.run_id, list(by_x.values())))
        if not lines:
            continue
        names = [x for line in lines for x in line.xs if isinstance(x, str)]
        categories = tuple(dict.fromkeys(str(x) for line in lines for x in line.xs)) \
            if names else ()
        out.append(Chart(metric=metric, axis=axis or "step", lines=tuple(lines),
                         categories=categories))
    return out


def _key(x: XValue) -> tuple[int, Any]:
    return (1, x) if isinstance(x, str) else (0, float(x))


def _line(name: str, run_id: int, points: list[SeriesPoint]) -> Line:
    if not any(isinstance(p.x, str) for p in points):
        points = sorted(points, key=lambda p: float(p.x))
    return Line(name=name, run_id=run_id, xs=tuple(p.x for p in points),
                ys=tuple(p.y for p in points), lo=tuple(p.lo for p in points),
                hi=tuple(p.hi for p in points))


def served_chart(metrics: Mapping[str, Any], name: str = "served") -> Chart | None:
    """A served benchmark's speedup at each concurrency it measured (``speedup_c<N>``), as
    a chart; None for a row without any."""
    levels = measured_levels(metrics)
    if not levels:
        return None
    line = Line(name=name, run_id=0, xs=tuple(levels),
                ys=tuple(float(metrics[f"speedup_c{c}"]) for c in levels))
    return Chart(metric="speedup", axis="concurrency", lines=(line,))


@dataclass(frozen=True)
class SeriesSummary:
    """One line of ``harness metrics``: a metric (and its labels) in one run."""

    metric: str
    axis: str
    labels: Mapping[str, Any]
    points: int
    first_x: XValue
    last_x: XValue
    last: float | None
    low: float | None
    high: float | None
    line: Line  # its points: one per x (the last recorded there), in order of x

    def to_json(self) -> dict[str, Any]:
        """With every point: ``[x, y]``, or ``[x, y, min, max]`` with a spread."""
        ln = self.line
        return {"metric": self.metric, "axis": self.axis, "labels": dict(self.labels),
                "count": self.points, "first_x": self.first_x, "last_x": self.last_x,
                "last": self.last, "min": self.low, "max": self.high,
                "points": [[x, y] if lo is None and hi is None else [x, y, lo, hi]
                           for x, y, lo, hi in zip(ln.xs, ln.ys, ln.lo, ln.hi, strict=True)]}


def summaries(points: Iterable[SeriesPoint]) -> list[SeriesSummary]:
    """Per metric and label set, in the order first recorded: how many points, the x range
    and the last, lowest and highest value."""
    groups: dict[tuple[str, str], list[SeriesPoint]] = {}
    for p in points:
        groups.setdefault((p.metric, label_text(p.labels)), []).append(p)
    out = []
    for pts in groups.values():
        ys = [p.y for p in pts if p.y is not None]
        line = _line("", pts[0].run_id, list({_key(p.x): p for p in pts}.values()))
        out.append(SeriesSummary(metric=pts[0].metric, axis=pts[0].axis,
                                 labels=pts[0].labels, points=len(line.xs),
                                 first_x=line.xs[0], last_x=line.xs[-1], last=line.last,
                                 low=min(ys) if ys else None, high=max(ys) if ys else None,
                                 line=line))
    return out


# ``is_series`` says which log lines are points (a log shown to people leaves them out).
__all__ = ["MAIN_METRIC", "Chart", "Line", "RunSeries", "SeriesSummary", "charts",
           "is_series", "label_text", "main_metric", "served_chart", "summaries"]
