"""The gate keys that hold served numbers, and the keys that may no longer gate.

A served benchmark (``eagle3.benchmark``) is the only evidence of speed an engine gives.
Two gate keys hold it:

- ``min_served_speedup: {at: 1, min: 1.3}`` (or a list of such mappings): the engine's
  speedup (``speedup_c<at>``, spec over plain output tokens/s) at that many concurrent
  requests must reach ``min``. A speedup is only meaningful at a concurrency: speculation
  that wins at batch 1 can lose at 32 requests at once.
- ``max_served_tau_gap: 0.10`` (or ``{max: 0.10, verify: STAGE}``): the served mean
  acceptance length may differ from the offline one (the ``eagle3.verify`` stage upstream
  by ``needs``, or the one named) by at most this share of the offline τ. A benchmark that
  follows a verify stage of the same checkpoint at the same k holds this at
  :data:`DEFAULT_TAU_GAP` without being told.

The reference loop's speedups (``eagle3.verify``'s ``reference_speedup_bound`` and
``projected_speedup``) are not measured the way an engine runs (no CUDA graphs, Python
between every step), so they are shown but refused as gates (:data:`NOT_A_GATE`).

Standard library only, like :mod:`pipeline.actions`; :mod:`pipeline.gates` reads the two
keys' forms with its parsers, once, when a spec is loaded.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pipeline.stage_graph import upstream

__all__ = ["DEFAULT_TAU_GAP", "NOT_A_GATE", "SERVED_KEYS", "GateFormError", "OfflinePair",
           "ServedSpeedup", "TauGap", "measured_levels", "not_a_gate", "offline_pair",
           "served_levels", "tau_gap", "tau_gap_form"]

SERVED_SPEEDUP = "min_served_speedup"
TAU_GAP = "max_served_tau_gap"


@dataclass(frozen=True)
class ServedSpeedup:
    """One level of ``min_served_speedup``: the engine's speedup at ``at`` concurrent
    requests reaches ``min``. ``listed``: the levels were written as a list (so they are
    stored as one, even a list of one)."""

    at: int
    min: float
    listed: bool = False
    key: ClassVar[str] = SERVED_SPEEDUP

    def form(self) -> Any:
        return {"at": self.at, "min": self.min}


@dataclass(frozen=True)
class TauGap:
    """``max_served_tau_gap``: the served τ within ``max`` (a share) of the offline τ of
    stage ``verify`` (None: the one found upstream). ``mapping``: written as ``{max: ...}``."""

    max: float
    verify: str | None = None
    mapping: bool = False
    key: ClassVar[str] = TAU_GAP

    def form(self) -> Any:
        if not self.mapping and self.verify is None:
            return self.max
        return {"max": self.max, **({"verify": self.verify} if self.verify is not None
                                    else {})}


class HeldGate(Protocol):
    """What these rules read of a stage's gate: :class:`pipeline.gates.Gate` has this
    shape, but its module reads the forms with this one's parsers."""

    @property
    def served_speedups(self) -> tuple[ServedSpeedup, ...]: ...

    @property
    def tau_gap(self) -> TauGap | None: ...


class Stage(Protocol):
    """What these rules read of a spec's stage: :class:`pipeline.spec.models.Stage` has this
    shape, but its module imports :mod:`pipeline.actions`, which imports this one."""

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> Sequence[str]: ...

    @property
    def action(self) -> str | None: ...

    @property
    def gate(self) -> HeldGate: ...

    @property
    def params(self) -> dict[str, Any]: ...


SERVED_KEYS = (SERVED_SPEEDUP, TAU_GAP)
SERVED_ACTION = "eagle3.benchmark"
SCHEDULE = "num_speculative_tokens_per_batch_size"
DEFAULT_TAU_GAP = 0.10

# Metrics of the reference loop (and the names they had before) that no gate may hold.
NOT_A_GATE = ("reference_speedup_bound", "measured_speedup", "projected_speedup")

_EXAMPLE = "{at: 1, min: 1.3}"
# The actions' own defaults, read by their parsers from here (verify.py --k, serve.py
# --num-speculative-tokens, benchmark.py --concurrency), so the gate rules judge a stage
# that leaves them out by what it will really run.
VERIFY_K = 3
SERVE_K = 3
BENCH_LEVELS = (1, 4, 16, 64)


class GateFormError(ValueError):
    """A gate value of the wrong form; ``index`` is the list entry it is in, if any, and
    ``key`` the gate key, when the whole gate was read."""

    def __init__(self, message: str, index: int | None = None, key: str | None = None):
        super().__init__(message)
        self.index = index
        self.key = key


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def tau_gap(served: float, offline: float) -> float:
    """How far the served τ is from the offline one, as a share of the offline τ."""
    return abs(served - offline) / offline


def measured_levels(metrics: Mapping[str, Any]) -> list[int]:
    """The concurrencies a benchmark measured a speedup at (its ``speedup_c<N>`` numbers)."""
    return sorted(int(m.group(1)) for k in metrics
                  if (m := re.fullmatch(r"speedup_c(\d+)", k)) and _number(metrics[k]))


def served_levels(value: Any) -> list[tuple[int, float]]:
    """``{at: 1, min: 1.3}`` or a list of them -> ``[(1, 1.3)]``; :class:`GateFormError`
    with the one-line reason (and the list entry) otherwise."""
    entries = value if isinstance(value, list) else [value]
    if not entries:
        raise GateFormError(f"expected {_EXAMPLE} or a list of them, got an empty list")
    out: list[tuple[int, float]] = []
    for i, entry in enumerate(entries):
        index = i if isinstance(value, list) else None
        if _number(entry):
            raise GateFormError(f"a served speedup holds at a concurrency: write {{at: 1, "
                                f"min: {entry}}} (1 request at a time), not a bare number",
                                index)
        if not isinstance(entry, dict):
            raise GateFormError(f"expected {_EXAMPLE}, got {entry!r}", index)
        extra = sorted(set(entry) - {"at", "min"})
        if extra:
            raise GateFormError(f"unknown key {extra[0]!r} (expected {_EXAMPLE})", index)
        level, least = entry.get("at"), entry.get("min")
        if not isinstance(level, int) or isinstance(level, bool) or level < 1:
            raise GateFormError(f"`at` must be a concurrency (a positive integer), got "
                                f"{level!r}", index)
        if not _number(least):
            raise GateFormError(f"`min` must be a number (the speedup), got {least!r}", index)
        if any(level == seen for seen, _m in out):
            raise GateFormError(f"concurrency {level} is held twice", index)
        out.append((level, float(least)))
    return out


def unmeasured_level(stage: Stage) -> str | None:
    """Why a ``min_served_speedup`` level cannot be met: the benchmark does not measure it
    (its ``concurrency``). Caught by ``harness check``, before any GPU time is spent."""
    levels = stage.params.get("concurrency", list(BENCH_LEVELS))
    if not isinstance(levels, list):
        return None  # the action refuses a malformed list itself
    for at in (level.at for level in stage.gate.served_speedups):
        if at not in levels:
            return (f"holds the speedup at {at} concurrent request{'s' if at != 1 else ''}, "
                    f"but the benchmark's `concurrency` is {levels}: add {at} to it, or "
                    "hold a level it measures")
    return None


def tau_gap_form(value: Any) -> tuple[float, str | None]:
    """``0.1`` or ``{max: 0.1, verify: STAGE}`` -> ``(0.1, STAGE or None)``."""
    if _number(value):
        tolerance, stage = float(value), None
    elif isinstance(value, dict):
        extra = sorted(set(value) - {"max", "verify"})
        if extra:
            raise GateFormError(f"unknown key {extra[0]!r} (expected a share such as 0.1, or "
                             "{max: 0.1, verify: STAGE})")
        if not _number(value.get("max")):
            raise GateFormError(f"`max` must be a share of the offline τ (0.1 is 10%), got "
                             f"{value.get('max')!r}")
        stage = value.get("verify")
        if stage is not None and not isinstance(stage, str):
            raise GateFormError(f"`verify` names a stage, got {stage!r}")
        tolerance = float(value["max"])
    else:
        raise GateFormError(f"expected a share of the offline τ (0.1 is 10%) or "
                         f"{{max: 0.1, verify: STAGE}}, got {value!r}")
    if not 0 <= tolerance < 1:
        raise GateFormError(f"the tolerance is a share of the offline τ between 0 and 1 (0.1 "
                         f"is 10%), got {tolerance:g}")
    return tolerance, stage


def not_a_gate(metric: str) -> str | None:
    """Why ``metric`` cannot gate (None: it can): the reference loop's speed is no
    engine's."""
    if metric not in NOT_A_GATE:
        return None
    old = {"measured_speedup": " (now named reference_speedup_bound)"}.get(metric, "")
    return (f"{metric}{old} comes from the reference loop (Python between steps, no CUDA "
            "graphs), an upper bound no engine reaches, so it no longer gates: hold the "
            f"engine's figure with `min_served_speedup: {_EXAMPLE}` on an {SERVED_ACTION} "
            "stage (docs/verify.md, \"Speed\")")


@dataclass
class OfflinePair:
    """The verify stage a benchmark's served τ is compared with, and at what tolerance.
    ``verify`` None: no comparison (``problem`` says why, when the gate asked for one)."""

    verify: Stage | None
    tolerance: float | None
    implied: bool = False          # held at DEFAULT_TAU_GAP without a gate key
    problem: str | None = None     # why a comparison the gate asks for cannot be made


def _same_path(a: Any, b: Any) -> bool:
    return isinstance(a, str) and isinstance(b, str) and \
        posixpath.normpath(a.rstrip("/")) == posixpath.normpath(b.rstrip("/"))


def _served(stage: Stage) -> bool:
    return stage.action == "eagle3.serve" and stage.params.get("speculative", True) is not False


def offline_pair(stages: Sequence[Stage], bench: Stage) -> OfflinePair:
    """Which ``eagle3.verify`` stage holds the offline τ for ``bench``'s served τ.

    Named by the gate (``{max: 0.1, verify: STAGE}``), or else found upstream by
    ``needs``: the verify stage whose ``checkpoint`` is the ``draft`` a speculative serve
    stage upstream serves, at the same k. Without a gate key, such a pair is compared at
    :data:`DEFAULT_TAU_GAP`; a benchmark with none is not compared.
    """
    if bench.action != SERVED_ACTION:
        return OfflinePair(None, None)
    held = bench.gate.tau_gap
    explicit = held is not None
    tolerance, named = (held.max, held.verify) if held is not None else (DEFAULT_TAU_GAP, None)
    ups = upstream(stages, bench.name)
    verifies = [s for s in ups if s.action == "eagle3.verify"]
    serves = [s for s in ups if _served(s)]

    def matching(v: Stage) -> list[Stage]:
        return [s for s in serves if _same_path(v.params.get("checkpoint"),
                                                s.params.get("draft"))]

    if named is not None:
        chosen = next((s for s in verifies if s.name == named), None)
        if chosen is None:
            return OfflinePair(None, tolerance, problem=(
                f"`verify: {named}` names no eagle3.verify stage this benchmark needs "
                "(directly or through its serve stages)"))
    else:
        paired = [v for v in verifies if matching(v)]
        if len(paired) == 1:
            chosen = paired[0]
        elif not explicit:
            return OfflinePair(None, None)
        elif len(verifies) == 1 and not paired:
            chosen = verifies[0]  # the gate asked, and there is only one to ask
        elif not verifies:
            return OfflinePair(None, tolerance, problem=(
                "no eagle3.verify stage comes before this benchmark by `needs`: make it "
                "(or its serve stage) need the verify stage of the checkpoint it serves"))
        else:
            names = ", ".join(v.name for v in (paired or verifies))
            return OfflinePair(None, tolerance, problem=(
                f"{'several' if paired else 'no'} eagle3.verify stages upstream measured "
                f"the served checkpoint ({names}): name one, {{max: {tolerance:g}, "
                "verify: STAGE}"))
    # a serve stage with a speculation schedule drafts a k that changes with the batch
    ks = [None if SCHEDULE in s.params else s.params.get("num_speculative_tokens", SERVE_K)
          for s in matching(chosen) or serves]
    verify_k = chosen.params.get("k", VERIFY_K)
    if ks and verify_k not in ks:
        if not explicit:
            return OfflinePair(None, None)
        drafts = "/".join(map(str, sorted({k for k in ks if k is not None})))
        what = (f"{drafts} tokens" if drafts else "") + (
            (" or " if drafts else "") + "a k per batch size (a schedule)" if None in ks
            else "")
        return OfflinePair(None, tolerance, problem=(
            f"{chosen.name} measures τ at k={verify_k}, the served drafter drafts {what}: "
            "the τ are not comparable (verify with the same k)"))
    if not explicit and isinstance(bench.params.get("url"), dict):
        # several candidates: which one's τ to hold is for the gate to say
        return OfflinePair(None, None)
    return OfflinePair(chosen, tolerance, implied=not explicit)
