"""Evidence: what decides the status of a job that ran to its end.

Exit 0 is not enough. A built-in action must leave its result file, every check the stage
names must be reported and pass, every declared output must exist, and the stage's gate
must hold against the action's metrics. The judgement lists the problems, numbers first,
and the checks and gate leave a verification row either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.gates import gate_items
from pipeline.actions import StageResult, table_note
from pipeline.gates import Gate
from pipeline.spec.models import Stage
from state.store import Tx


def gate_outcome(gate: Gate, metrics: dict[str, Any]) -> str:
    """``passed``, ``failed`` (an item failed), or ``undecided`` (none failed, and an
    interval straddles its threshold: the evidence cannot tell yet)."""
    items = gate_items(gate, metrics)
    if all(i.passed for i in items):
        return "passed"
    return "failed" if any(i.outcome == "failed" for i in items) else "undecided"


def evaluate_gate(gate: Gate, metrics: dict[str, Any]) -> tuple[bool, list[str]]:
    """Returns (passed, one line per threshold)."""
    items = gate_items(gate, metrics)
    return all(i.passed for i in items), [i.line for i in items]


def gate_reason(gate: Gate, result: StageResult | None) -> str:
    """Why a gate did not pass, numbers first: the action's own summary (for eagle3.verify
    ``acceptance 15% (τ 1.17) at k=3; pos1 40%; projected 0.66x``), then what the gate
    needs of each item that did not pass and what was measured. An undecided gate says so
    in its first words: it is not a failure, and a longer measurement may decide it."""
    metrics = result.metrics if result is not None else {}
    failing = [i.needs for i in gate_items(gate, metrics) if not i.passed]
    head = headline(result.summary) if result is not None else ""
    return f"gate {gate_outcome(gate, metrics)}: " + (f"{head}; " if head else "") + \
        "gate needs " + ", ".join(failing)


def headline(summary: str) -> str:
    """A summary without the list of failed checks the reason carries anyway."""
    return summary.split("; failed: ")[0].split("; all checks passed")[0].strip()


@dataclass
class Judgement:
    """A finished job's verdict: the problems that block it (empty: it succeeded), the
    note a success leaves, and the gate's outcome for the verification row."""

    problems: list[str]
    note: str | None
    gate_ok: bool
    gate_lines: list[str]


def judge(stage: Stage, result: StageResult | None, missing_outputs: list[str], *,
          gate: Gate | None = None) -> Judgement:
    """``gate``: what the stage is held to, when more than its own (a benchmark's implied
    served-vs-offline τ check, :mod:`.offline`)."""
    gate = stage.gate if gate is None else gate
    problems: list[str] = []
    if stage.is_builtin and result is None:
        problems.append("the action wrote no result file")
    if result is not None:
        failed = [c for c in result.checks if not c.passed]
        problems += [f"check {c.name} failed: {c.value} (expected {c.expected})"
                     + (f" - {c.message}" if c.message else "") for c in failed]
        named = {c.name for c in result.checks}
        problems += [f"check {name} was not reported by the action"
                     for name in stage.checks if name not in named]
    elif stage.checks:
        problems.append(f"checks {', '.join(stage.checks)} need a built-in action")
    problems += [f"output {p} is missing" for p in missing_outputs]
    gate_ok, gate_lines = evaluate_gate(gate, result.metrics if result else {})
    if gate and not gate_ok:
        # The measured numbers lead the reason: they are what a person acts on.
        problems.insert(0, gate_reason(gate, result))
    note = (gated_headline(result) + "gate passed: " + "; ".join(gate_lines)) \
        if gate else (result.summary if result else "")
    return Judgement(problems, note or None, gate_ok, gate_lines)


def gated_headline(result: StageResult | None) -> str:
    """The action's headline and how many checks passed only by a table, each followed by
    ``; ``, to lead a gate's lines: the headline drops the summary's tail, where the action
    counts them, and the count comes before the long gate lines a display may cut."""
    if result is None:
        return ""
    parts = [headline(result.summary), table_note(result.checks)]
    return "".join(f"{p}; " for p in parts if p)


def checks_failed_alone(result: StageResult | None) -> bool:
    """An action that ran to the end but whose own checks failed exits 1 too; its checks
    are then the reason, and they are evidence worth a verification row."""
    return result is not None and result.error is None and \
        any(not c.passed for c in result.checks)


def record_verification(tx: Tx, stage: Stage, todo: int, run_id: int,
                        result: StageResult | None, verdict: Judgement, *,
                        gate: Gate | None = None) -> None:
    """The checks and gate of a finished job, as a ``verifications`` row; the gate is
    stored in the form it was written in (:meth:`Gate.to_json`)."""
    gate = stage.gate if gate is None else gate
    if result is None or not (result.checks or gate):
        return
    passed = result.ok and (verdict.gate_ok or not gate)
    text = (gated_headline(result) + f"gate {gate_outcome(gate, result.metrics)}: "
            + "; ".join(verdict.gate_lines)) if gate \
        else (result.summary or ("all checks passed" if passed else "checks failed"))
    sha = result.metrics.get("sha256")
    tx.record_verification(
        todo_id=todo, run_id=run_id, kind=stage.action or "run",
        artifact=result.artifacts[0] if result.artifacts else None,
        sha256=sha if isinstance(sha, str) else None, passed=passed, verdict=text,
        checks=[c.to_json() for c in result.checks], metrics=result.metrics,
        gate=gate.to_json())
