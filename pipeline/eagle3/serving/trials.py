"""Repeated trials of a served benchmark: each server's figures over the trials, the speedup
per trial, its spread, and whether a level is stable enough to decide on.

A trial runs every concurrency once on every server, the baseline and each candidate back
to back at each level (:mod:`pipeline.eagle3.benchmark`). The speedup of a trial is the candidate's output
tokens/s over the baseline's *of the same trial*, so slow drift of the host between trials
does not enter a ratio. Per level and figure the trials give a :class:`Spread`: the median
and the smallest and largest trial.

What a gate holds is the conservative figure, the smallest trial's speedup
(:attr:`LevelVerdict.conservative`). With three trials a bootstrap lower bound would claim
a precision three numbers do not have: the 5% quantile of the means of resampled triples
lies between the smallest trial and the median, less conservative than the smallest, and
no more informative. A level whose trials spread more than ``tolerance`` (``(largest -
smallest) / median`` of the speedup; default 10%) is *unstable*: the gate reports it and
does not decide on it.

Standard library only.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.eagle3.serving.load_levels import Level
from pipeline.eagle3.serving.report import OutputComparison, compare_outputs
from pipeline.vllm.metrics import SpecDelta

__all__ = ["BASELINE", "DEFAULT_TOLERANCE", "FIGURES", "LevelVerdict", "ServerLevel",
           "Spread", "server_levels", "verdicts"]

BASELINE = "baseline"
DEFAULT_TOLERANCE = 0.10

# (key, where it is in Level.summary(), label): the figures reported per server and level
FIGURES = (("tok_s", ("output_throughput",), "tok/s"),
           ("tpot_p50_ms", ("tpot_ms", "p50"), "TPOT p50"),
           ("tpot_p99_ms", ("tpot_ms", "p99"), "TPOT p99"),
           ("itl_p50_ms", ("itl_ms", "p50"), "ITL p50"),
           ("itl_p99_ms", ("itl_ms", "p99"), "ITL p99"),
           ("ttft_p50_ms", ("ttft_ms", "p50"), "TTFT p50"),
           ("ttft_p99_ms", ("ttft_ms", "p99"), "TTFT p99"))


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

    @property
    def relative(self) -> float | None:
        """``(high - low) / median``: how far apart the trials are."""
        if self.n < 2 or not self.median:
            return None
        return (self.high - self.low) / self.median  # type: ignore[operator]

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

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "concurrency": self.concurrency,
                "trials": len(self.trials),
                **{key: self.figure(key).to_json() for key, _p, _l in FIGURES}}


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
    """A candidate against the baseline at one concurrency, over the trials."""

    candidate: str
    concurrency: int
    tolerance: float
    speedups: list[float] = field(default_factory=list)   # per trial, in trial order
    outputs: OutputComparison | None = None

    @property
    def speedup(self) -> Spread:
        return Spread.of(self.speedups)

    @property
    def conservative(self) -> float | None:
        """The figure a gate holds: the smallest trial's speedup."""
        return min(self.speedups) if self.speedups else None

    @property
    def spread(self) -> float | None:
        return self.speedup.relative

    @property
    def stable(self) -> bool | None:
        """None: one trial, so no spread was measured."""
        spread = self.spread
        return None if spread is None else spread <= self.tolerance

    @property
    def word(self) -> str:
        return {True: "stable", False: "UNSTABLE", None: "1 trial"}[self.stable]


def verdicts(levels: Sequence[Level], candidate: str, prompt_ids: list[str], *,
             tolerance: float = DEFAULT_TOLERANCE) -> dict[int, LevelVerdict]:
    """Per concurrency: ``candidate``'s speedup over the baseline in each trial where both
    completed, and its answers against the baseline's (every trial, request by request)."""
    out: dict[int, LevelVerdict] = {}
    by = {(lv.role, lv.concurrency, lv.trial): lv for lv in levels}
    for lv in levels:
        if lv.role != candidate:
            continue
        verdict = out.setdefault(lv.concurrency,
                                 LevelVerdict(candidate, lv.concurrency, tolerance))
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
