"""Offline and served figures of one drafter, side by side, as `harness show` and the TUI
put them.

The offline figures are an ``eagle3.verify`` row's: τ, acceptance per position, and the
reference loop's speed (an upper bound, and a projection from its step costs). The served
ones are an ``eagle3.benchmark`` row's: τ and per-position acceptance from vLLM's
counters, and the speedup at each concurrency it measured. A benchmark row carries the
verify row it was compared with (``offline_verification``, added by the runner), which is
how the two are paired; a benchmark row alone still shows its ``offline_*`` copies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.served_gates import measured_levels, tau_gap
from state.fold import VerificationState

__all__ = ["Comparison", "comparisons", "served_rows_for", "speed_figures",
           "verification_figures"]

SERVED_KIND = "eagle3.benchmark"
OFFLINE_KIND = "eagle3.verify"


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def reference_bound(m: Mapping[str, Any]) -> float | None:
    """The reference loop's speedup (named ``measured_speedup`` in stores before it was
    renamed)."""
    return _num(m.get("reference_speedup_bound", m.get("measured_speedup")))


def speed_figures(m: Mapping[str, Any]) -> list[str]:
    """The speed of a row in words that cannot be mistaken: ``1.42x served c=1`` for a
    benchmark, ``≤2.17x ref`` (the reference loop's bound) or ``2.34x proj`` for verify."""
    levels = measured_levels(m)
    if levels:
        return [f"{m[f'speedup_c{levels[0]}']:.2f}x served c={levels[0]}"]
    bound = reference_bound(m)
    if bound is not None:
        return [f"≤{bound:.2f}x ref"]
    proj = _num(m.get("projected_speedup"))
    return [f"{proj:.2f}x proj"] if proj is not None else []


def verification_figures(metrics: Mapping[str, Any]) -> str:
    """``τ 1.87  1.42x served c=1``: the mean acceptance length, and the speed in words
    that say whose it is: served by the engine (a benchmark), or the verify stage's
    reference-loop bound (``≤2.17x ref``) or projection (``2.34x proj``)."""
    parts = []
    tau = _num(metrics.get("tau"))
    tau = tau if tau is not None else _num(metrics.get("acceptance_length"))
    if tau is not None:
        parts.append(f"τ {tau:.2f}")
    parts += speed_figures(metrics)
    return "  ".join(parts)


def _pos(x: Any) -> str:
    if isinstance(x, list) and x and all(_num(v) is not None for v in x):
        return "/".join(f"{v:.3f}" for v in x)
    return "-"


@dataclass
class Comparison:
    """One served benchmark beside the offline verification of the same checkpoint."""

    served: VerificationState
    offline: VerificationState | None   # None: only the copies in the served row

    @property
    def title(self) -> str:
        off = f"v{self.offline.id}" if self.offline is not None else \
            str(self.served.metrics.get("offline_source") or "offline")
        return f"offline ({OFFLINE_KIND} {off}) beside served ({SERVED_KIND} v{self.served.id})"

    def rows(self) -> list[tuple[str, str, str]]:
        """(what, offline, served) lines: τ, per position, speed at each level (``c=N``:
        N requests at once). The offline speed is the reference loop's: a bound."""
        s = self.served.metrics
        o = dict(self.offline.metrics) if self.offline is not None else {
            k.removeprefix("offline_"): v for k, v in s.items() if k.startswith("offline_")}
        otau = _num(o.get("acceptance_length", o.get("tau")))
        stau = _num(s.get("acceptance_length"))
        gap = ""
        if otau and stau is not None:
            gap = f" ({tau_gap(stau, otau):.1%} apart)"
        out = [("τ", "-" if otau is None else f"{otau:.3f}",
                ("-" if stau is None else f"{stau:.3f}") + gap),
               ("per position", _pos(o.get("acceptance_per_position")),
                _pos(s.get("acceptance_per_position")))]
        bound, proj = reference_bound(o), _num(o.get("projected_speedup"))
        offline_speed = ", ".join(x for x in (
            f"≤{bound:.2f}x bound" if bound is not None else "",
            f"{proj:.2f}x projected" if proj is not None else "") if x) or "-"
        levels = measured_levels(s)
        if not levels:
            out.append(("speedup", offline_speed, "not measured"))
        for i, c in enumerate(levels):
            served = f"{s[f'speedup_c{c}']:.2f}x"
            ctau = _num(s.get(f"acceptance_length_c{c}"))
            if ctau is not None:
                served += f" (τ {ctau:.2f})"
            out.append((f"speedup c={c}", offline_speed if i == 0 else "", served))
        return out


def served_rows_for(offline: VerificationState,
                    rows: Iterable[VerificationState]) -> list[VerificationState]:
    """The benchmark rows compared with ``offline`` (its id in ``offline_verification``)."""
    return [v for v in rows if v.kind == SERVED_KIND
            and v.metrics.get("offline_verification") == offline.id]


def comparisons(mine: Iterable[VerificationState],
                session_rows: Iterable[VerificationState]) -> list[Comparison]:
    """For a todo's rows: each benchmark row beside its offline row, and each verify row
    beside the benchmarks compared with it (the newest of each)."""
    every = list(session_rows)
    by_id = {v.id: v for v in every}
    out: list[Comparison] = []
    seen: set[int] = set()
    for v in mine:
        if v.kind == SERVED_KIND and "offline_acceptance_length" in v.metrics:
            pairs = [(v, by_id.get(v.metrics.get("offline_verification")))]
        elif v.kind == OFFLINE_KIND:
            pairs = [(b, v) for b in served_rows_for(v, every)]
        else:
            continue
        for served, offline in pairs:
            if served.id not in seen:
                seen.add(served.id)
                out.append(Comparison(served, offline))
    return out
