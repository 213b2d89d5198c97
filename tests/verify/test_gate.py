"""The verify stage's gate through `harness run`: a bad drafter's todo ends blocked with the
measured numbers in its reason; a good one completes with the numbers noted on it."""

from __future__ import annotations

import re

import pytest
import yaml

from state.store import Store
from tests.conftest import run_cli

pytestmark = [pytest.mark.ml, pytest.mark.sqlite]

GATE = {"min_acceptance_length": 2.0, "min_position_acceptance": 0.5}


def _stage(name: str, good: dict, checkpoint, **extra) -> dict:
    return {"name": name, "todo": f"Verify {name}", "action": "eagle3.verify",
            "with": {"checkpoint": str(checkpoint), "verifier": str(good["verifier"]),
                     "data": str(good["prompts"]), "exclude": str(good["exclude"]),
                     "samples": 6, "max_new_tokens": 48, "k": 3, "device": "cpu",
                     "threads": 1, **extra},
            "gate": GATE}


def test_gate_blocks_the_bad_drafter_and_passes_the_good(good, variants, tmp_path, db_url):
    spec = tmp_path / "verify.yaml"
    spec.write_text(yaml.safe_dump({
        "pipeline": "verify-gate",
        "hosts": {"local": {"workdir": str(tmp_path / "work")}},
        "stages": [_stage("good", good, good["dir"]),
                   _stage("stale_head", good, variants("lm_head_permuted"),
                          baselines_free_running=False)]}, sort_keys=False))
    r = run_cli(["--db", db_url, "run", str(spec), "--quiet"])
    assert r.code == 1, r.err  # one stage blocked

    with Store.open(db_url) as store:
        sid = store.session_by_name("default").id
        todos = {t.stage: t for t in store.todos(sid)}
        bad, ok = todos["stale_head"], todos["good"]

        assert bad.status == "blocked"
        reason = bad.blocked_reason
        # "r2 failed: gate failed: acceptance 0% (τ 1.00) at k=3; pos1 0%; reference-loop
        #  bound 0.49x, projected 0.52x (not served: eagle3.benchmark measures the engine)
        #  (CPU timings: indicative only); gate needs acceptance_length ≥ 2 (measured 1),
        #  position_acceptance pos1 ≥ 0.5 (measured 0); check lm_head_rows ..."
        assert re.search(r"gate failed: acceptance \d+% \(τ 1\.\d\d\) at k=3; pos1 \d+%; "
                         r"reference-loop bound \d\.\d\dx, projected \d\.\d\dx \(not served: "
                         r"eagle3\.benchmark measures the engine\) \(CPU timings: indicative "
                         r"only\); gate needs acceptance_length ≥ 2 \(measured 1(\.\d+)?\)",
                         reason), reason
        assert "measured 0.4" not in reason.split("gate needs")[0]  # no speed "measured"
        assert "position_acceptance pos1 ≥ 0.5 (measured 0" in reason
        assert "check lm_head_rows failed" in reason

        assert ok.status == "completed", ok.blocked_reason
        notes = [e.payload["text"] for e in store.events(sid, todo_id=ok.num,
                                                         kinds=["todo.noted"])]
        assert len(notes) == 1 and "gate passed: acceptance_length" in notes[0]
        assert re.search(r"acceptance \d+% \(τ [23]\.\d\d\) at k=3", notes[0]), notes[0]

        rows = {v.todo_id: v for v in store.verifications(sid)}
        good_row, bad_row = rows[ok.num], rows[bad.num]
        assert good_row.passed and not bad_row.passed
        assert good_row.run_id is not None and good_row.kind == "eagle3.verify"
        assert good_row.sha256 and len(good_row.sha256) == 64
        assert good_row.artifact == str(good["dir"].resolve())
        assert good_row.gate == GATE
        assert good_row.metrics["acceptance_length"] >= 2.0
        assert bad_row.verdict.startswith("acceptance ") and "gate failed" in bad_row.verdict


# A row an older harness recorded: its verify stage reported the reference loop's speed
# as ``measured_speedup`` and a gate could hold it.
OLD_ROW_METRICS = {"projected_speedup": 1.42, "measured_speedup": 0.445,
                   "timings_indicative": True,
                   "metric_notes": {"measured_speedup": "wall clock of the speculative loop "
                                                        "over plain decoding; CPU timings "
                                                        "are indicative only"}}


def test_an_old_rows_speed_gate_still_reads_with_its_note():
    """Stores written before the rename still show what their gate held, and how far to
    trust it (the TUI and `harness show` judge stored rows with the same code)."""
    from harness.gates import Gate, gate_items

    (item,) = gate_items(Gate.from_json({"min_measured_speedup": 1.0}), OLD_ROW_METRICS)
    assert not item.passed and item.metric == "measured_speedup" and item.value == 0.445
    assert item.needs == ("measured_speedup ≥ 1 (measured 0.445; wall clock of the "
                          "speculative loop over plain decoding; CPU timings are indicative "
                          "only)")
    (plain,) = gate_items(Gate.from_json({"min_acceptance_length": 2.0}),
                         {"acceptance_length": 2.5})
    assert plain.line == "acceptance_length 2.5 meets >= 2"


@pytest.mark.parametrize("key", ["min_measured_speedup", "min_projected_speedup",
                                 "min_reference_speedup_bound", "max_projected_speedup"])
def test_harness_check_refuses_a_gate_on_the_reference_loops_speed(tmp_path, key):
    spec = tmp_path / "verify.yaml"
    spec.write_text(yaml.safe_dump({
        "pipeline": "verify-speed", "hosts": {"local": {"workdir": str(tmp_path / "w")}},
        "stages": [{"name": "verify", "action": "eagle3.verify",
                    "with": {"checkpoint": "drafter", "verifier": "verifier",
                             "data": "prompts.jsonl", "device": "cpu"},
                    "gate": {"min_acceptance_length": 2.0, key: 1.1}}]}))
    r = run_cli(["check", str(spec)])
    assert r.code == 1 and r.err.count("\n") == 1 and "Traceback" not in r.err, r.err
    assert f"stages[0] (verify).gate.{key}: " in r.err
    assert "an upper bound no engine reaches" in r.err
    assert "min_served_speedup: {at: 1, min: 1.3}" in r.err and "eagle3.benchmark" in r.err
    if key == "min_measured_speedup":
        assert "(now named reference_speedup_bound)" in r.err


def test_harness_verify_refuses_a_speed_gate_before_any_work(db_url, tmp_path):
    r = run_cli(["--db", db_url, "verify", str(tmp_path / "nothing"), "--verifier",
                 str(tmp_path / "nothing"), "--gate", "min_projected_speedup=1.1"])
    assert r.code != 0 and r.err.count("\n") == 1 and "Traceback" not in r.err, r.err
    assert "--gate min_projected_speedup: projected_speedup comes from the reference loop" \
        in r.err and "min_served_speedup" in r.err


def test_harness_verify_names_the_reference_loops_speed_a_bound(good, db_url):
    """The headline calls the loop's speed what it is: an upper bound, not served; the
    metric is reference_speedup_bound, and `harness show`-style readers find it."""
    r = run_cli(["--db", db_url, "verify", str(good["dir"]), "--verifier",
                 str(good["verifier"]), "--data", str(good["prompts"]), "--exclude",
                 str(good["exclude"]), "--samples", "3", "--max-new-tokens", "32",
                 "--device", "cpu", "--gate", "min_acceptance_length=0"])
    assert r.code == 0, r.err
    speed = next(line for line in r.out.splitlines() if line.startswith("speed"))
    assert speed.startswith("speed (reference loop, not served): upper bound ")
    assert "no engine reaches these, the served speedup is eagle3.benchmark's" in speed
    assert "measured" not in speed
    with Store.open(db_url) as store:
        (v,) = store.verifications()
    m = v.metrics
    assert isinstance(m["reference_speedup_bound"], float) and "measured_speedup" not in m
    assert f"reference-loop bound {m['reference_speedup_bound']:.2f}x" in v.verdict
    assert "(not served: eagle3.benchmark measures the engine)" in v.verdict
    listing = run_cli(["--db", db_url, "verifications"]).out
    assert f"≤{m['reference_speedup_bound']:.2f}x ref" in listing
