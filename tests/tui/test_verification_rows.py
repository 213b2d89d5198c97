"""The verification panel's gate rows judge a gate exactly as the runner does."""

from __future__ import annotations

from harness.gates import Gate, gate_items
from tui.widgets.verification import gate_rows


def test_gate_rows_show_list_metrics_and_agree_with_the_runner() -> None:
    gate = Gate.from_json({"min_acceptance_length": 2.0,
                           "min_position_acceptance": [0.6, 0.5], "min_projected_speedup": 1.1})
    metrics = {"tau": 1.87, "position_acceptance": [0.52, 0.24, 0.11],
               "projected_speedup": 1.04}
    rows = [(label.plain, value.plain) for label, value in gate_rows(gate, metrics)]
    assert rows == [
        ("min_acceptance_length", "✗ 1.87, needs ≥ 2"),
        ("min_position_acceptance", "✗ pos1 0.52, needs ≥ 0.6"),
        ("min_projected_speedup", "✗ 1.04, needs ≥ 1.1"),
    ]
    judged = gate_items(gate, {**metrics, "acceptance_length": 1.87})
    assert [i.passed for i in judged] == [False, False, False]
    ok = gate_rows(Gate.from_json({"min_position_acceptance": [0.5, 0.2]}), metrics)
    assert ok[0][1].plain == "✓ 0.52, 0.24, needs ≥ 0.5, 0.2"
