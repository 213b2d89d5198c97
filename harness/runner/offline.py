"""What a served benchmark is held to beside its own numbers: the offline τ of its drafter.

A benchmark stage's served τ (``acceptance_length``, from vLLM's counters) is compared
with the τ the ``eagle3.verify`` stage measured on the same checkpoint
(:func:`pipeline.served_gates.offline_pair` says which stage). The offline figures come
from the store: the newest ``eagle3.verify`` verification recorded for that stage's todo
in this session. They join the benchmark's metrics as ``offline_*`` (so its verification
row shows both, and ``harness show`` and the TUI can put them side by side), and the gate
gains a :class:`pipeline.gates.TauGap` at the default tolerance when the pairing implies it.
"""

from __future__ import annotations

from typing import Any

from pipeline.gates import Gate, TauGap
from pipeline.served_gates import offline_pair, tau_gap
from pipeline.spec.models import Pipeline, Stage
from state.fold import VerificationState
from state.store import Store

__all__ = ["OFFLINE_FIGURES", "offline_context", "offline_figures", "with_gap"]

# verify metric -> the name it takes among the benchmark's metrics (old names first read)
OFFLINE_FIGURES = {"acceptance_length": "offline_acceptance_length",
                   "acceptance_per_position": "offline_acceptance_per_position",
                   "reference_speedup_bound": "offline_reference_speedup_bound",
                   "projected_speedup": "offline_projected_speedup",
                   "k": "offline_k"}


def _newest_verify(store: Store, sid: int, stage_name: str) -> VerificationState | None:
    todo = next((t for t in store.todos(sid) if t.stage == stage_name), None)
    if todo is None:
        return None
    rows = [v for v in store.verifications(sid, todo_id=todo.num)
            if v.kind == "eagle3.verify"]
    return rows[-1] if rows else None


def offline_figures(v: VerificationState) -> dict[str, Any]:
    """A verify row's figures under their ``offline_*`` names (a store written before the
    rename has ``measured_speedup`` and ``tau``; they are read as the new names)."""
    m = dict(v.metrics)
    m.setdefault("acceptance_length", m.get("tau"))
    m.setdefault("reference_speedup_bound", m.get("measured_speedup"))
    out = {new: m[old] for old, new in OFFLINE_FIGURES.items() if m.get(old) is not None}
    out["offline_verification"] = v.id
    return out


def offline_context(store: Store, sid: int, spec: Pipeline, stage: Stage
                    ) -> tuple[Gate, dict[str, Any]]:
    """The gate ``stage`` is held to (its own, plus an implied ``max_served_tau_gap``) and
    the metrics to add to its result (``offline_*``, or ``offline_problem``)."""
    gate = stage.gate
    pair = offline_pair(spec.stages, stage)
    if pair.verify is None:
        return gate, ({"offline_problem": pair.problem} if pair.problem else {})
    row = _newest_verify(store, sid, pair.verify.name)
    figures = offline_figures(row) if row is not None else {}
    if "offline_acceptance_length" not in figures:
        if pair.implied:
            return gate, {}  # verify measured no τ (functional checks off): nothing to hold
        why = (f"stage {pair.verify.name} has no recorded verification" if row is None else
               f"stage {pair.verify.name} (v{row.id}) measured no τ (functional checks off?)")
        return gate, {"offline_problem": why}
    if pair.implied and pair.tolerance is not None:
        gate = gate.adding(TauGap(pair.tolerance))
    figures["offline_source"] = f"{pair.verify.name} v{row.id}"
    return gate, figures


def with_gap(metrics: dict[str, Any]) -> dict[str, Any]:
    """``served_tau_gap`` (|served - offline| / offline) when both τ are there."""
    served, offline = metrics.get("acceptance_length"), metrics.get("offline_acceptance_length")
    if isinstance(served, (int, float)) and isinstance(offline, (int, float)) and offline > 0:
        return {**metrics, "served_tau_gap": round(tau_gap(served, offline), 4)}
    return metrics
