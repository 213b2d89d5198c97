"""Points of the series a job recorded, as the store keeps them (table ``run_series``).

A job prints one line per point (``pipeline.series`` says how); the runner parses them as
the log streams and hands them to the write transaction with the log text they came in
(:meth:`state.tx.Tx.append_points`), keyed by the byte offset of their line in the log.
Like the log, points are data, not events: the fold never sees them, so recording them
costs an agent's todo write nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from state.values import dumps

Label = str | int | float
XValue = int | float | str

SERIES_COLS = "run_id, start, metric, axis, x, y, labels, lo, hi, ts"


@dataclass(frozen=True)
class SeriesPoint:
    """``metric`` (on ``axis``) was ``y`` at ``x``, in run ``run_id``.

    ``start``: the byte offset of the line it came from in the run's log. ``labels`` tell
    the lines of one metric apart (``{"position": 2}``, ``{"server": "plain"}``).
    ``lo``/``hi``: the spread (min, max) of the trials behind ``y``. ``y`` is None for a
    value that was not a finite number.
    """

    run_id: int
    start: int
    metric: str
    axis: str
    x: XValue
    y: float | None
    labels: Mapping[str, Label] = field(default_factory=dict)
    lo: float | None = None
    hi: float | None = None
    ts: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run": f"r{self.run_id}", "metric": self.metric,
                               "axis": self.axis, "x": self.x, "y": self.y}
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.lo is not None or self.hi is not None:
            out["spread"] = [self.lo, self.hi]
        out["ts"] = self.ts
        return out


def finite(value: float | None) -> float | None:
    """``value``, or None when it is not a finite number (the store keeps NULL)."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def point_values(p: SeriesPoint) -> tuple[Any, ...]:
    return (p.run_id, p.start, p.metric, p.axis, dumps(p.x), finite(p.y),
            dumps(dict(p.labels)) if p.labels else "{}", finite(p.lo), finite(p.hi), p.ts)


def point_from_row(r: Sequence[Any]) -> SeriesPoint:
    return SeriesPoint(run_id=r[0], start=r[1], metric=r[2], axis=r[3], x=json.loads(r[4]),
                       y=r[5], labels=json.loads(r[6]) if r[6] != "{}" else {}, lo=r[7],
                       hi=r[8], ts=r[9])


__all__ = ["SERIES_COLS", "SeriesPoint", "finite", "point_from_row", "point_values"]
