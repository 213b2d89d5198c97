"""Gates name metrics their action reports: a misspelt one fails `harness check` at once."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from pipeline.actions import (
    ACTION_METRICS,
    BUILTIN_ACTIONS,
    StageResult,
    declares_metric,
    make_parser,
    run_action,
)
from tests.conftest import ROOT, run_cli


def spec_with_gate(tmp_path: Path, gate: dict, **stage) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "eagle3-tiny.yaml").read_text())
    verify = next(s for s in doc["stages"] if s["name"] == "verify")
    verify["gate"] = gate
    verify.update(stage)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_misspelt_gate_metric_is_refused_with_did_you_mean(tmp_path: Path) -> None:
    r = run_cli(["check", str(spec_with_gate(tmp_path, {"min_acceptence_length": 2.0}))])
    assert r.code == 1
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert "stages[8] (verify).gate.min_acceptence_length" in r.err
    assert "eagle3.verify reports no metric 'acceptence_length'" in r.err
    assert "did you mean 'min_acceptance_length'?" in r.err


def test_a_far_off_name_lists_what_the_action_reports(tmp_path: Path) -> None:
    r = run_cli(["check", str(spec_with_gate(tmp_path, {"max_zzz": 1}))])
    assert r.code == 1 and "a gate takes min_METRIC or max_METRIC of: " in r.err
    assert "position_acceptance" in r.err


def test_a_run_stage_cannot_have_a_gate(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("pipeline: p\nstages:\n  - name: a\n    run: 'true'\n"
                    "    gate: {min_x: 1}\n")
    r = run_cli(["check", str(path)])
    assert r.code == 1 and "stages[0] (a).gate: a gate needs an `action`" in r.err


@pytest.mark.parametrize("gate", [{"min_speedup_c16": 1.05}, {"speedup_c1": 1.0},
                                  {"max_requests_failed": 0}])
def test_numbered_metrics_of_the_benchmark_pass(tmp_path: Path, gate: dict) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "eagle3-serve.yaml").read_text())
    next(s for s in doc["stages"] if s.get("action") == "eagle3.benchmark")["gate"] = gate
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = run_cli(["check", str(path)])
    assert r.code == 0, r.err


def test_every_example_spec_passes() -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        r = run_cli(["check", str(path)])
        assert r.code == 0, (path, r.err)


def test_every_action_declares_its_metrics() -> None:
    assert set(ACTION_METRICS) == set(BUILTIN_ACTIONS)
    assert declares_metric("eagle3.train", "heldout_acc_pos3")
    assert not declares_metric("eagle3.train", "heldout_acc_pos")
    assert not declares_metric("eagle3.verify", "acceptence_length")


def test_an_undeclared_number_fails_the_action_under_the_test_suite(tmp_path: Path) -> None:
    """The suite sets HARNESS_CHECK_METRICS=1 (tests/conftest.py): an action that reports a
    number the table does not declare fails, so the table keeps up with the code."""
    def fn(_args: argparse.Namespace) -> StageResult:
        return StageResult(action="eagle3.vocab", metrics={"coverage": 0.9, "covrage": 0.9,
                                                           "note": "text is not gated"})
    result = tmp_path / "result.json"
    rc = run_action("eagle3.vocab", fn, make_parser("eagle3.vocab", "test"),
                    ["--result", str(result)])
    assert rc == 1
    assert json.loads(result.read_text())["error"] == (
        "eagle3.vocab reported metrics not declared in pipeline/actions.py ACTION_METRICS: "
        "covrage")


def test_a_misspelt_served_key_is_offered_the_served_key(tmp_path: Path) -> None:
    """The suggestion compares whole keys: min_servd_speedup is one letter from
    min_served_speedup, farther from min_speedup (which the metric names alone offered)."""
    doc = yaml.safe_load((ROOT / "examples" / "eagle3-h200.yaml").read_text())
    bench = next(s for s in doc["stages"] if s["name"] == "benchmark")
    bench["gate"] = {"min_servd_speedup": {"at": 1, "min": 1.3}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = run_cli(["check", str(path)])
    assert r.code == 1 and "Traceback" not in r.err
    assert "(benchmark).gate.min_servd_speedup: eagle3.benchmark reports no metric " \
        "'servd_speedup' (did you mean 'min_served_speedup'?)" in r.err, r.err
