"""The verify stage's gate through `harness run`: a bad drafter's todo ends blocked with the
measured numbers in its reason; a good one completes with the numbers noted on it."""

from __future__ import annotations

import re

import pytest
import yaml

from state.store import Store
from tests.conftest import run_cli

pytestmark = [pytest.mark.ml, pytest.mark.sqlite]

GATE = {"min_acceptance_length": 2.0, "min_position_acceptance": 0.5,
        "min_projected_speedup": 1.0}


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
        # "r2 failed: gate failed: acceptance 0% (τ 1.00) at k=3; pos1 0%; projected 0.52x;
        #  gate needs acceptance_length ≥ 2 (measured 1), position_acceptance pos1 ≥ 0.5
        #  (measured 0), projected_speedup ≥ 1 (measured 0.5152); check lm_head_rows ..."
        assert re.search(r"gate failed: acceptance \d+% \(τ 1\.\d\d\) at k=3; pos1 \d+%; "
                         r"projected \d\.\d\dx; gate needs acceptance_length ≥ 2 \(measured "
                         r"1(\.\d+)?\)", reason), reason
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
