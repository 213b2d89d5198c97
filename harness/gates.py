"""Gates: the thresholds a stage's measured metrics must meet (``min_x``/``max_x``).

One judgement, used by the runner (to complete or block a todo, and to word the reason)
and by the TUI's verification panel (to show each threshold against what was measured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.actions import gate_metric

__all__ = ["GateItem", "gate_items"]


@dataclass
class GateItem:
    """One threshold of a gate, compared with what the action measured."""

    key: str                        # as written in the spec: min_acceptance_length
    metric: str                     # acceptance_length
    op: str                         # ">=" or "<="
    threshold: float | list[float]
    value: Any                      # the measured value compared (None: missing)
    passed: bool
    where: str = ""                 # "pos2 " when one position of a list is shown
    limit: Any = None               # the threshold shown (that position's, for a list)

    def __post_init__(self) -> None:
        if self.limit is None:
            self.limit = self.threshold

    @property
    def line(self) -> str:
        """``acceptance_length 1.17 fails >= 2``, as the run's reason and the TUI say it."""
        if self.value is None:
            return f"{self.metric} missing (gate needs {self.op} {_fmt(self.limit)})"
        return (f"{self.metric} {self.where}{_fmt(self.value)} "
                f"{'meets' if self.passed else 'fails'} {self.op} {_fmt(self.limit)}")

    @property
    def needs(self) -> str:
        """``projected_speedup ≥ 1.1 (measured 0.66)``, for a blocked todo's reason."""
        sign = "≥" if self.op == ">=" else "≤"
        measured = "missing" if self.value is None else f"measured {_fmt(self.value)}"
        return f"{self.metric} {self.where}{sign} {_fmt(self.limit)} ({measured})"


def _fmt(x: Any) -> str:
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return f"{x:.4g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def gate_items(gate: dict[str, Any], metrics: dict[str, Any]) -> list[GateItem]:
    """``min_x: t`` needs metric ``x >= t``; ``max_x`` needs ``<=``; a bare name is ``min``.

    A metric that is a list (per-position acceptance) is held by a number at its first
    entry (position 1), or by a list entry by entry (``[0.6, 0.4]``: positions 1 and 2).
    """
    items = []
    for key, threshold in gate.items():
        metric, op = gate_metric(key)
        value = metrics.get(metric)

        def good(v: float, t: float, op: str = op) -> bool:
            return v >= t if op == ">=" else v <= t

        if isinstance(value, list) and value and all(_is_number(v) for v in value):
            wanted = threshold if isinstance(threshold, list) else [threshold]
            if len(value) < len(wanted):
                items.append(GateItem(key, metric, op, threshold, None, False))
                continue
            failing = [i for i, t in enumerate(wanted) if not good(value[i], t)]
            if failing or not isinstance(threshold, list):
                i = failing[0] if failing else 0
                items.append(GateItem(key, metric, op, threshold, value[i], not failing,
                                      f"pos{i + 1} ", wanted[i]))
            else:
                items.append(GateItem(key, metric, op, threshold, value[: len(wanted)], True))
        elif _is_number(value) and not isinstance(threshold, list):
            items.append(GateItem(key, metric, op, threshold, value, good(value, threshold)))
        else:
            items.append(GateItem(key, metric, op, threshold, None, False))
    return items


