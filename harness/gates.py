"""Gates: the thresholds a stage's measured metrics must meet (``min_x``/``max_x``).

One judgement, used by the runner (to complete or block a todo, and to word the reason)
and by the TUI's verification panel (to show each threshold against what was measured).

An action may say how far to trust a metric: ``metrics["metric_notes"]`` maps a metric
name to a short note (``eagle3.verify`` on a CPU: ``projected_speedup`` is "projected from
the median step costs; the measured loop ran 0.45x; CPU timings are indicative only").
Each line and each blocked reason that uses the metric carries its note, so a gate passed
on a projection says so.

Two keys hold served numbers (:mod:`pipeline.served_gates`): ``min_served_speedup: {at: 1,
min: 1.3}`` holds the benchmark's ``speedup_c1`` (over repeated trials, the smallest
the trials' estimate with its confidence interval), one item per level: it passes when the
interval's lower bound meets the threshold, fails when its upper bound is below it, and is
*undecided* (:attr:`GateItem.undecided`) when the threshold lies inside an interval the
benchmark's budget left wide; a level the benchmark did not measure fails by name.
``max_served_tau_gap: 0.1`` holds how far the
served τ (``acceptance_length``) lies from the offline one (``offline_acceptance_length``,
which the runner adds from the verify stage upstream), and its line names both.

``require_vllm: true`` holds the vLLM compatibility checks: none of them may have been
answered from the table of known rules (``vllm_checks_from_table`` must be 0).

A gate comes here as typed values (:class:`pipeline.gates.Gate`), read once where it
entered: the spec loader for a stage's, :meth:`Gate.from_json` for a stored row's. Nothing
here reads a gate's written form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.actions import FAIL, PASS, REQUIRE_VLLM, TABLE, TABLE_CHECKS, check_status
from pipeline.gates import (
    Gate,
    RequireVllm,
    ServedSpeedup,
    TauGap,
    Threshold,
    Unreadable,
)
from pipeline.served_gates import SERVED_SPEEDUP, TAU_GAP, measured_levels, tau_gap

# A check's status (PASS, FAIL, or TABLE: answered from a table, not checked), and the
# typed gate a stored row is read into, for the TUI, which may not import pipeline itself.
__all__ = ["FAIL", "PASS", "TABLE", "UNDECIDED", "Gate", "GateItem", "check_status",
           "gate_items", "outcome"]

UNDECIDED = "undecided"


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
    note: str = ""                  # how far to trust the metric (the action's word)
    missing: str = ""               # why the value is missing, when it is known
    says: str = ""                  # the whole line, for items that read better in words
    undecided: bool = False         # neither passed nor failed: the evidence cannot tell

    def __post_init__(self) -> None:
        if self.limit is None:
            self.limit = self.threshold

    @property
    def outcome(self) -> str:
        """``passed``, ``failed`` or ``undecided``."""
        return "passed" if self.passed else "undecided" if self.undecided else "failed"

    @property
    def line(self) -> str:
        """``acceptance_length 1.17 fails >= 2``, as the run's reason and the TUI say it."""
        if self.says:
            return self.says
        if self.value is None:
            why = f": {self.missing}" if self.missing else ""
            return (f"{self.metric} {self.where}missing{why} (gate needs {self.op} "
                    f"{_fmt(self.limit)})")
        return (f"{self.metric} {self.where}{_fmt(self.value)} "
                f"{'meets' if self.passed else 'fails'} {self.op} {_fmt(self.limit)}"
                + (f" ({self.note})" if self.note else ""))

    @property
    def needs(self) -> str:
        """``projected_speedup ≥ 1.1 (measured 0.66)``, for a blocked todo's reason."""
        sign = "≥" if self.op == ">=" else "≤"
        if self.metric == "served_tau_gap":
            return f"served τ within {_pct(self.limit)} of offline τ ({self.line})"
        if self.key == REQUIRE_VLLM:
            return f"vLLM's own answers: {self.line}"
        if self.says:
            return self.says
        measured = "missing" if self.value is None else f"measured {_fmt(self.value)}"
        if self.value is None and self.missing:
            measured += f": {self.missing}"
        note = f"; {self.note}" if self.note and self.value is not None else ""
        return f"{self.metric} {self.where}{sign} {_fmt(self.limit)} ({measured}{note})"


def outcome(passed: bool, checks: list[dict[str, Any]], gate: dict[str, Any] | None,
            metrics: dict[str, Any]) -> str:
    """A verification row's outcome: ``passed``, ``failed``, or ``undecided`` when every
    check passed and no gate item failed, but an interval straddles its threshold."""
    if passed:
        return "passed"
    if any(check_status(c) == FAIL for c in checks) or not gate:
        return "failed"
    items = gate_items(Gate.from_json(gate), metrics)
    return UNDECIDED if items and all(i.passed or i.undecided for i in items) else "failed"


def _fmt(x: Any) -> str:
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return f"{x:.4g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _pct(x: Any) -> str:
    return f"{x:.0%}" if isinstance(x, (int, float)) and x >= 0.095 else \
        f"{x:.1%}" if isinstance(x, (int, float)) else str(x)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def gate_items(gate: Gate, metrics: dict[str, Any]) -> list[GateItem]:
    """``min_x: t`` needs metric ``x >= t``; ``max_x`` needs ``<=``; a bare name is ``min``.

    A metric that is a list (per-position acceptance) is held by a number at its first
    entry (position 1), or by a list entry by entry (``[0.6, 0.4]``: positions 1 and 2).
    """
    if not isinstance(gate, Gate):
        raise TypeError(f"gate_items judges a typed Gate (pipeline.gates.read_gate or "
                        f"Gate.from_json), got {type(gate).__name__}")
    notes = metrics.get("metric_notes")
    notes = notes if isinstance(notes, dict) else {}
    levels = measured_levels(metrics)
    items = []
    for value in gate.values:
        if isinstance(value, RequireVllm):
            items.append(require_vllm_item(value, metrics))
        elif isinstance(value, ServedSpeedup):
            items.append(served_speedup_item(value, levels, metrics))
        elif isinstance(value, TauGap):
            items.append(tau_gap_item(value, metrics))
        elif isinstance(value, Unreadable):  # a stored row from a hand-made gate: say so
            items.append(GateItem(value.key, value.metric, value.op, 0.0, None, False,
                                  missing=f"the gate's form is wrong ({value.problem})"))
        else:
            items.append(threshold_item(value, metrics))
            note = notes.get(items[-1].metric)
            if isinstance(note, str):
                items[-1].note = note
    return items


def threshold_item(held: Threshold, metrics: dict[str, Any]) -> GateItem:
    """One ``min_x``/``max_x`` against the metric; a list limit holds a list metric
    position by position."""
    key, metric, op = held.key, held.metric, held.op
    threshold: float | list[float] = held.form()
    value = metrics.get(metric)

    def good(v: float, t: float) -> bool:
        return v >= t if op == ">=" else v <= t

    if isinstance(value, list) and value and all(_is_number(v) for v in value):
        wanted = threshold if isinstance(threshold, list) else [threshold]
        if len(value) < len(wanted):
            return GateItem(key, metric, op, threshold, None, False)
        failing = [i for i, t in enumerate(wanted) if not good(value[i], t)]
        if failing or not isinstance(threshold, list):
            i = failing[0] if failing else 0
            return GateItem(key, metric, op, threshold, value[i], not failing,
                            f"pos{i + 1} ", wanted[i])
        return GateItem(key, metric, op, threshold, value[: len(wanted)], True)
    if _is_number(value) and not isinstance(threshold, list):
        return GateItem(key, metric, op, threshold, value, good(value, threshold))
    return GateItem(key, metric, op, threshold, None, False)


def require_vllm_item(held: RequireVllm, metrics: dict[str, Any]) -> GateItem:
    """``require_vllm: true``: no vLLM check was answered from the table of known rules
    (every one was asked of an installed vLLM)."""
    item = GateItem(REQUIRE_VLLM, TABLE_CHECKS, "<=", 0, None, not held.required)
    if not held.required:
        item.says = "vLLM checks from the table allowed (require_vllm: false)"
        return item
    n = metrics.get(TABLE_CHECKS)
    if not _is_number(n):
        item.missing = "the result does not say where its vLLM answers came from"
        item.says = f"require_vllm: {item.missing}"
        return item
    item.value, item.passed = n, n == 0
    item.says = ("every vLLM check was asked of an installed vLLM" if item.passed else
                 f"{n} vLLM check{'s' if n != 1 else ''} answered from the table, not by "
                 "vLLM, and the gate has require_vllm: install vLLM where the stage runs, "
                 "or give vllm_python")
    return item


def served_speedup_item(level: ServedSpeedup, measured: list[int],
                        metrics: dict[str, Any]) -> GateItem:
    """One level of ``min_served_speedup``, holding ``speedup_c<at>`` with its interval
    (``speedup_low_c<at>``/``speedup_high_c<at>``; ``measured``: the levels the benchmark
    measured): passed when the lower bound meets the threshold, failed when the upper bound
    is below it, undecided in between. A result from before intervals (no bounds) is held
    as it was: its smallest trial, and a spread over its tolerance is undecided."""
    at, least = level.at, level.min
    value = metrics.get(f"speedup_c{at}")
    item = GateItem(SERVED_SPEEDUP, "served_speedup", ">=", least,
                    value if _is_number(value) else None,
                    _is_number(value) and value >= least, where=f"c={at} ")
    if item.value is None:
        item.missing = (f"the benchmark measured no speedup at {at} concurrent "
                        f"request{'s' if at != 1 else ''} ("
                        + (f"it measured c={', '.join(map(str, measured))}"
                           if measured else "it measured no level")
                        + f"); add {at} to its `concurrency`")
        return item
    low, high = metrics.get(f"speedup_low_c{at}"), metrics.get(f"speedup_high_c{at}")
    if _is_number(low) and _is_number(high):
        _hold_interval(item, at, float(low), float(high), metrics)
    elif "speedup_trials_c" + str(at) in metrics:  # one trial: no interval to decide on
        item.passed, item.undecided = False, True
        item.says = (f"served_speedup c={at} undecided: {_fmt(value)}x from one trial, "
                     f"which gives no interval (>= {_fmt(least)} wanted): set the "
                     "benchmark's `trials` to 2 or more")
    else:
        _hold_spread(item, at, metrics)
    return item


def _hold_interval(item: GateItem, at: int, low: float, high: float,
                   metrics: dict[str, Any]) -> None:
    least = float(item.limit)
    n = metrics.get(f"speedup_trials_c{at}")
    confidence = metrics.get("confidence")
    conf = f"{confidence:.0%} " if _is_number(confidence) else ""
    trials = f", {n} trials" if _is_number(n) else ""
    span = f"{conf}interval {_fmt(low)}-{_fmt(high)}x{trials}"
    item.passed = low >= least
    item.undecided = not item.passed and high >= least
    if item.undecided:
        width = metrics.get(f"speedup_ci_c{at}")
        budget = metrics.get("level_budget")
        why = metrics.get(f"stopped_c{at}")
        ran_out = {"budget": f"its {_fmt(budget)} s budget" if _is_number(budget)
                   else "its budget", "max_trials": "max_trials"}.get(str(why), "its trials")
        item.says = (f"served_speedup c={at} undecided: {_fmt(item.value)}x, {span}, holds "
                     f">= {_fmt(least)} inside it"
                     + (f" (+-{width:.1%} when {ran_out} ran out)" if _is_number(width)
                        else "")
                     + ": give the level more time (`level_budget`, `extra_budget`, "
                       "`max_trials`) or steadier runs (`min_seconds`)")
    else:
        item.note = span


def _hold_spread(item: GateItem, at: int, metrics: dict[str, Any]) -> None:
    """A stored result of the spread rule (before intervals): the smallest trial, and a
    spread past its tolerance is undecided."""
    least = item.threshold
    figure, tolerance = metrics.get("speedup_figure"), metrics.get("spread_tolerance")
    spread = metrics.get(f"speedup_spread_c{at}")
    if isinstance(figure, str) and figure:
        item.note = figure + (f", spread {spread:.0%}" if _is_number(spread) else "")
    if _is_number(spread) and _is_number(tolerance) and spread > tolerance:
        high = metrics.get(f"speedup_max_c{at}")
        span = f" ({_fmt(item.value)}-{_fmt(high)}x)" if _is_number(high) else ""
        item.passed, item.undecided = False, True
        item.says = (f"served_speedup c={at} undecided: its trials spread {spread:.0%}"
                     f"{span}, over the {tolerance:.0%} tolerance (>= {_fmt(least)} "
                     "wanted): run the benchmark again")


def tau_gap_item(held: TauGap, metrics: dict[str, Any]) -> GateItem:
    """How far the served τ lies from the offline τ, as a share of the offline one."""
    tolerance = held.max
    served, offline = metrics.get("acceptance_length"), metrics.get("offline_acceptance_length")
    item = GateItem(TAU_GAP, "served_tau_gap", "<=", tolerance, None, False)
    if not _is_number(offline) or offline <= 0:
        why = metrics.get("offline_problem")
        item.missing = why if isinstance(why, str) and why else \
            "no offline τ: no verify stage of this checkpoint came before the benchmark"
        item.says = f"served τ vs offline τ: {item.missing} (tolerance {_pct(tolerance)})"
        return item
    if not _is_number(served):
        item.missing = "the server exported no spec-decode counters, so no served τ"
        item.says = (f"served τ missing vs offline τ {offline:.2f}: {item.missing} "
                     f"(tolerance {_pct(tolerance)})")
        return item
    gap = tau_gap(served, offline)
    item.value, item.passed = round(gap, 4), gap <= tolerance
    source = metrics.get("offline_source")
    of = f" of {source}" if isinstance(source, str) and source else ""
    item.says = (f"served τ {served:.2f} vs offline τ {offline:.2f}{of}: {_pct(gap)} apart "
                 f"(tolerance {_pct(tolerance)})")
    if not item.passed:
        item.says += ("; the engine feeds the drafter differently from how it was trained"
                      if served < offline else
                      "; the served run measures something else than verify did (other "
                      "prompts, sampling or k?)")
    return item
