"""A stage's gate is read into typed values once, by the spec loader: the stage holds them,
the stored row keeps the form as written, and the judgement takes only typed values."""

from __future__ import annotations

from typing import Any

import pytest

import harness.gates
from harness.gates import gate_items
from pipeline.errors import SpecError
from pipeline.gates import (
    Gate,
    RequireVllm,
    ServedSpeedup,
    TauGap,
    Threshold,
    Unreadable,
    parse_gate,
)
from pipeline.served_gates import GateFormError
from pipeline.spec.load import parse_spec

SERVED = {"min_served_speedup": [{"at": 1, "min": 1.3}, {"at": 64, "min": 1.0}],
          "max_served_tau_gap": {"max": 0.10, "verify": "verify"}}


def _spec(bench_gate: dict[str, Any]) -> dict[str, Any]:
    return {"pipeline": "p", "stages": [
        {"name": "verify", "action": "eagle3.verify",
         "with": {"checkpoint": "drafter", "verifier": "verifier"},
         "gate": {"min_acceptance_length": 2.0, "min_position_acceptance": [0.6, 0.4],
                  "require_vllm": True}},
        {"name": "serve", "action": "eagle3.serve", "needs": ["verify"],
         "with": {"target": "verifier", "draft": "drafter"}},
        {"name": "benchmark", "action": "eagle3.benchmark", "needs": ["serve"],
         "with": {"concurrency": [1, 64]}, "gate": bench_gate}]}


def test_the_loader_reads_a_served_gate_into_typed_values_once() -> None:
    spec = parse_spec(_spec(SERVED))
    gate = spec.stage("benchmark").gate
    assert gate.values == (ServedSpeedup(1, 1.3, listed=True),
                           ServedSpeedup(64, 1.0, listed=True),
                           TauGap(0.1, "verify", mapping=True))
    assert spec.stage("verify").gate.values == (
        Threshold("min_acceptance_length", "acceptance_length", ">=", 2.0),
        Threshold("min_position_acceptance", "position_acceptance", ">=", (0.6, 0.4)),
        RequireVllm(True))
    # the spec written out (`harness run --json`) shows the gate as the file wrote it
    dumped = spec.model_dump(mode="json", by_alias=True)["stages"]
    assert dumped[2]["gate"] == SERVED and dumped[1]["gate"] == {}


@pytest.mark.parametrize("form", [
    SERVED,
    {"min_served_speedup": {"at": 1, "min": 1.3}},
    {"min_served_speedup": [{"at": 4, "min": 1.1}]},   # a list of one stays a list
    {"max_served_tau_gap": 0.1},
    {"max_served_tau_gap": {"max": 0.2}},
    {"max_loss": 3.0, "min_position_acceptance": [0.6, 0.4, 0.2], "require_vllm": False},
])
def test_parse_then_to_json_gives_back_the_form_as_written(form: dict[str, Any]) -> None:
    gate = parse_gate(form)
    assert gate.to_json() == form
    assert list(gate.to_json()) == list(form)  # the keys keep their order
    assert Gate.from_json(gate.to_json()) == gate


@pytest.mark.parametrize("gate, where, message", [
    ({"min_served_speedup": [{"at": 1, "min": 1.3}, {"at": 0, "min": 1.0}]},
     "stages[2] (benchmark).gate.min_served_speedup[1]",
     "`at` must be a concurrency (a positive integer), got 0"),
    ({"min_served_speedup": 1.3}, "stages[2] (benchmark).gate.min_served_speedup",
     "a served speedup holds at a concurrency: write {at: 1, min: 1.3} (1 request at a "
     "time), not a bare number"),
    ({"max_served_tau_gap": {"max": 0.1, "stage": "verify"}},
     "stages[2] (benchmark).gate.max_served_tau_gap",
     "unknown key 'stage' (expected a share such as 0.1, or {max: 0.1, verify: STAGE})"),
    ({"min_speedup_c1": {"at": 1}}, "stages[2] (benchmark).gate.min_speedup_c1",
     "expected a number or a list of numbers, got {'at': 1}"),
])
def test_a_bad_form_is_one_located_line(gate: dict[str, Any], where: str,
                                        message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_spec(gate), source="p.yaml")
    assert caught.value.where == f"p.yaml: {where}"
    assert caught.value.message == message
    assert "\n" not in str(caught.value)


def test_parse_gate_names_the_key_and_entry_of_a_bad_form() -> None:
    with pytest.raises(GateFormError) as caught:
        parse_gate({"min_loss": 1.0, "min_served_speedup": [{"at": 1, "min": 1.3},
                                                            {"at": 1, "min": 1.1}]})
    assert (caught.value.key, caught.value.index, str(caught.value)) == (
        "min_served_speedup", 1, "concurrency 1 is held twice")


def test_the_judgement_takes_only_typed_values() -> None:
    with pytest.raises(TypeError, match="typed Gate"):
        gate_items({"min_served_speedup": {"at": 1, "min": 1.3}},  # type: ignore[arg-type]
                   {"speedup_c1": 1.4})
    # the harness judges the values; it holds none of the form parsers
    assert not any(hasattr(harness.gates, name)
                   for name in ("served_levels", "tau_gap_form", "gate_metric"))
    (item,) = gate_items(Gate((ServedSpeedup(1, 1.3),)), {"speedup_c1": 1.42})
    assert item.passed and item.line == "served_speedup c=1 1.42 meets >= 1.3"


def test_a_stored_gate_of_the_wrong_form_reads_and_fails_by_name() -> None:
    """A hand-made row is read without raising; its entry fails and says why."""
    gate = Gate.from_json({"min_served_speedup": 1.3, "min_acceptance_length": 2.0})
    bad = gate.problem("min_served_speedup")
    assert isinstance(bad, Unreadable) and gate.to_json()["min_served_speedup"] == 1.3
    wrong, tau = gate_items(gate, {"speedup_c1": 1.4, "acceptance_length": 2.5})
    assert not wrong.passed and wrong.line.startswith(
        "served_speedup missing: the gate's form is wrong (a served speedup holds at a "
        "concurrency")
    assert tau.passed


def test_an_implied_tau_gap_is_added_after_the_written_keys() -> None:
    gate = parse_gate({"min_served_speedup": {"at": 1, "min": 1.3}}).adding(TauGap(0.1))
    assert gate.to_json() == {"min_served_speedup": {"at": 1, "min": 1.3},
                              "max_served_tau_gap": 0.1}
