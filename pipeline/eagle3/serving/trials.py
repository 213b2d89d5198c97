"""Paired trials of a served benchmark, in ABBA order, until the speedup's interval is narrow.

At each concurrency the benchmark measures the baseline and every candidate back to back,
one *trial* each, and alternates the order from trial to trial: baseline then candidates,
then candidates then baseline (:func:`trial_order`), so that two trials are an ABBA block
and a drift of the host that is linear over the block cancels in their pair of ratios. A
trial's speedup is the candidate's output tokens/s over the baseline's *in that trial*.

Per level and candidate the speedups give an estimate and a confidence interval
(:class:`LevelVerdict`): the geometric mean of the trials' speedups, and Student's t
interval of the mean of their logarithms (SciPy's ``ttest_1samp(...).confidence_interval``)
mapped back. Ratios multiply, so logarithms make a 10% faster and a 10% slower trial
weigh the same. The benchmark keeps adding ABBA blocks until every candidate's interval is
within ``± ci_width`` of its estimate (:attr:`LevelVerdict.settled`), or the level's time
budget or trial cap is spent: sampling until a fixed-width interval is reached is Chow and
Robbins' sequential rule (1965). One slow trial widens the interval; it cannot decide a
level alone, since the level then runs on until the others outweigh it.

A gate holds the interval (:func:`decision`): it passes when the lower bound meets the
threshold, fails when the upper bound is below it, and is *undecided* only when the
threshold lies inside an interval that the budget left wider than asked.

Standard library only at import; the interval imports SciPy when first computed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.eagle3.serving.load_levels import Level
from pipeline.eagle3.serving.report import OutputComparison, compare_outputs
from pipeline.errors import ActionError
from pipeline.vllm.metrics import SpecDelta

__all__ = [
    "BASELINE",
    "DEFAULT_CI_WIDTH",
    "DEFAULT_CONFIDENCE",
    "FAIL",
    "FIGURES",
    "PASS",
    "UNDECIDED",
    "Interval",
    "LevelVerdict",
    "ServerLevel",
    "Spread",
    "decision",
    "interval",
    "server_levels",
    "trial_order",
    "verdicts",
]

BASELINE = "baseline"
DEFAULT_CI_WIDTH = 0.05
DEFAULT_CONFIDENCE = 0.95
PASS, FAIL, UNDECIDED = "pass", "fail", "undecided"

# (key, where it is in Level.summary(), label): the figures reported per server and level
FIGURES = (("tok_s", ("output_throughput",), "tok/s"),
           ("tpot_p50_ms", ("tpot_ms", "p50"), "TPOT p50"),
           ("tpot_p99_ms", ("tpot_ms", "p99"), "TPOT p99"),
           ("itl_p50_ms", ("itl_ms", "p50"), "ITL p50"),
           ("itl_p99_ms", ("itl_ms", "p99"), "ITL p99"),
           ("ttft_p50_ms", ("ttft_ms", "p50"), "TTFT p50"),
           ("ttft_p99_ms", ("ttft_ms", "p99"), "TTFT p99"))


def trial_order(servers: Sequence[Any], trial: int) -> list[Any]:
    """The order of trial ``trial`` (from 1): as given in odd trials, reversed in even ones,
    so trials 1 and 2 are A B | B A, and so on."""
    return list(servers) if trial % 2 else list(reversed(servers))


@dataclass(frozen=True)
class Interval:
    """An estimate and its confidence interval (``low``/``high`` None: fewer than two
    trials, or trials that all agree to the last digit, give no interval)."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def half_width(self) -> float | None:
        """The interval's half-width as a share of the estimate: 0.05 is ± 5%. An interval
        on the log scale is not symmetric; this is its wider side."""
        if self.estimate is None or self.low is None or self.high is None:
            return None
        return max(self.high / self.estimate - 1.0, 1.0 - self.low / self.estimate)

    def to_json(self) -> dict[str, Any]:
        r = lambda x: None if x is None else round(x, 4)  # noqa: E731
        return {"estimate": r(self.estimate), "low": r(self.low), "high": r(self.high),
                "n": self.n, "half_width": r(self.half_width), "confidence": self.confidence}


def interval(ratios: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """The geometric mean of ``ratios`` and the t interval of their mean log, mapped back."""
    xs = [float(x) for x in ratios if x is not None and x > 0]
    if not xs:
        return Interval(None, None, None, 0, confidence)
    logs = [math.log(x) for x in xs]
    estimate = math.exp(statistics.fmean(logs))
    if len(xs) < 2:
        return Interval(estimate, None, None, len(xs), confidence)
    if max(logs) - min(logs) == 0.0:  # identical trials: the t interval is a point
        return Interval(estimate, estimate, estimate, len(xs), confidence)
    try:
        from scipy import stats
    except ImportError:
        raise ActionError("the benchmark's confidence intervals need SciPy on this host",
                          hint="pip install scipy (it comes with the eagle3 extra)") from None
    ci = stats.ttest_1samp(logs, 0.0).confidence_interval(confidence_level=confidence)
    return Interval(estimate, math.exp(float(ci.low)), math.exp(float(ci.high)), len(xs),
                    confidence)


def decision(low: float | None, high: float | None, threshold: float) -> str:
    """:data:`PASS` when the whole interval meets ``threshold``, :data:`FAIL` when the whole
    interval is below it, :data:`UNDECIDED` when it straddles it (or there is none)."""
    if low is not None and low >= threshold:
        return PASS
    if high is not None and high < threshold:
        return FAIL
    return UNDECIDED


@dataclass(frozen=True)
class Spread:
    """A figure over trials: the median, the smallest and the largest trial."""

    median: float | None
    low: float | None
    high: float | None
    n: int = 0

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Spread:
        xs = [float(v) for v in values if v is not None]
        if not xs:
            return cls(None, None, None, 0)
        return cls(statistics.median(xs), min(xs), max(xs), len(xs))

    def to_json(self, digits: int = 4) -> list[float | None]:
        r = lambda x: None if x is None else round(x, digits)  # noqa: E731
        return [r(self.median), r(self.low), r(self.high)]


def _figure(summary: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = summary
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, (int, float)) else None


@dataclass
class ServerLevel:
    """One server at one concurrency, over its complete (not interrupted) trials."""

    role: str
    concurrency: int
    trials: list[Level] = field(default_factory=list)

    def figure(self, key: str) -> Spread:
        path = next(p for k, p, _label in FIGURES if k == key)
        return Spread.of(_figure(lv.summary(), path) for lv in self.trials)

    @property
    def spec(self) -> SpecDelta | None:
        """The spec-decode counter deltas of every trial at this level, summed."""
        deltas = [lv.spec for lv in self.trials if lv.spec is not None]
        if not deltas:
            return None
        total = SpecDelta()
        for d in deltas:
            total = total + d
        return total


def server_levels(levels: Sequence[Level]) -> dict[tuple[str, int], ServerLevel]:
    """(role, concurrency) -> its complete trials, in the order measured."""
    out: dict[tuple[str, int], ServerLevel] = {}
    for lv in levels:
        if lv.interrupted:
            continue
        out.setdefault((lv.role, lv.concurrency),
                       ServerLevel(lv.role, lv.concurrency)).trials.append(lv)
    return out


@dataclass
class LevelVerdict:
    """A candidate against the baseline at one concurrency, over its paired trials."""

    candidate: str
    concurrency: int
    ci_width: float = DEFAULT_CI_WIDTH
    confidence: float = DEFAULT_CONFIDENCE
    speedups: list[float] = field(default_factory=list)   # per trial, in trial order
    outputs: OutputComparison | None = None
    stopped: str | None = None  # why its level took no more trials (the benchmark says)

    @property
    def interval(self) -> Interval:
        return interval(self.speedups, self.confidence)

    @property
    def estimate(self) -> float | None:
        """The figure a gate holds, with its interval: the trials' geometric mean."""
        return self.interval.estimate

    @property
    def settled(self) -> bool:
        """Its interval is as narrow as asked (``± ci_width``)."""
        width = self.interval.half_width
        return width is not None and width <= self.ci_width

    @property
    def speedup(self) -> Spread:
        return Spread.of(self.speedups)

    def word(self) -> str:
        """``settled`` / ``WIDE`` (the budget ran out first) / ``1 trial``."""
        if len(self.speedups) < 2:
            return f"{len(self.speedups)} trial"
        return "settled" if self.settled else "WIDE"


def verdicts(levels: Sequence[Level], candidate: str, prompt_ids: list[str], *,
             ci_width: float = DEFAULT_CI_WIDTH,
             confidence: float = DEFAULT_CONFIDENCE) -> dict[int, LevelVerdict]:
    """Per concurrency: ``candidate``'s speedup over the baseline in each trial where both
    completed, and its answers against the baseline's (every trial, request by request)."""
    out: dict[int, LevelVerdict] = {}
    by = {(lv.role, lv.concurrency, lv.trial): lv for lv in levels}
    for lv in levels:
        if lv.role != candidate:
            continue
        verdict = out.setdefault(lv.concurrency, LevelVerdict(candidate, lv.concurrency,
                                                              ci_width, confidence))
        base = by.get((BASELINE, lv.concurrency, lv.trial))
        if base is None:
            continue
        comparison = compare_outputs(lv, base, prompt_ids)
        verdict.outputs = comparison if verdict.outputs is None else \
            verdict.outputs.merged(comparison)
        if not lv.interrupted and not base.interrupted and lv.throughput and \
                base.throughput:
            verdict.speedups.append(lv.throughput / base.throughput)
    return out
