"""`harness verify` and `harness verifications`: recorded results, links, gates, bad input."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from state.store import Store
from tests.conftest import harness_subprocess, run_cli

pytestmark = [pytest.mark.ml, pytest.mark.sqlite]  # the store itself is tested on both


def test_verify_records_a_row_linked_to_the_todo(good, db_url):
    run_cli(["--db", db_url, "add", "Verify the exported drafter"])
    r = run_cli(["--db", db_url, "verify", str(good["dir"]), "--verifier", str(good["verifier"]),
                 "--todo", "t1", "--json"])
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["passed"] and out["verification"] == "v1" and out["todo"] == "t1"
    assert out["result"]["metrics"]["format"] == "eagle"

    listed = run_cli(["--db", db_url, "verifications", "--todo", "t1", "--json"])
    assert listed.code == 0, listed.err
    rows = json.loads(listed.out)["verifications"]
    assert len(rows) == 1
    row = rows[0]
    import hashlib
    digest = hashlib.sha256((good["dir"] / "model.safetensors").read_bytes()).hexdigest()
    assert row["sha256"] == digest and row["artifact"] == str(good["dir"].resolve())
    assert row["todo"] == "t1" and row["kind"] == "eagle3.verify" and row["passed"]
    assert {c["name"] for c in row["checks"]} >= {"d2t", "lm_head_rows", "vllm_eagle3_target"}

    text = run_cli(["--db", db_url, "verifications"])
    assert "v1" in text.out and "PASS" in text.out and digest[:12] in text.out
    assert json.loads(run_cli(["--db", db_url, "verifications", "--todo", "t2",
                               "--json"]).out)["verifications"] == []


def test_a_failing_gate_is_a_failed_verification_with_the_numbers(good, variants, db_url):
    r = run_cli(["--db", db_url, "verify", str(variants("lm_head_permuted")), "--verifier",
                 str(good["verifier"]), "--data", str(good["prompts"]), "--exclude",
                 str(good["exclude"]), "--samples", "4", "--max-new-tokens", "32",
                 "--gate", "min_acceptance_length=2.0", "--gate",
                 "min_position_acceptance=0.5", "--json"])
    assert r.code == 1, r.err
    out = json.loads(r.out)
    assert not out["passed"]
    verdict = out["verdict"]
    assert verdict.startswith("gate failed: acceptance ") and "at k=3" in verdict
    assert "gate needs acceptance_length ≥ 2 (measured 1" in verdict
    assert "position_acceptance pos1 ≥ 0.5 (measured 0" in verdict
    with Store.open(db_url) as store:
        (v,) = store.verifications()
    assert not v.passed and v.gate == {"min_acceptance_length": 2.0,
                                       "min_position_acceptance": 0.5}
    assert v.metrics["tau"] < 1.2 and v.todo_id is None


@pytest.mark.parametrize("damage", ["no_weights", "truncated"])
def test_bad_checkpoint_is_one_line_naming_the_file(good, tmp_path, db_url, damage):
    d = tmp_path / damage
    shutil.copytree(good["dir"], d)
    weights = d / "model.safetensors"
    if damage == "no_weights":
        weights.unlink()
        named = str(d)
    else:
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) - 1000])
        named = str(weights)
    r = run_cli(["--db", db_url, "verify", str(d), "--verifier", str(good["verifier"]),
                 "--json"])
    assert r.code == 1 and r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0]
    assert "Traceback" not in r.err
    with Store.open(db_url) as store:
        assert store.verifications() == []


def test_usage_errors(good, db_url):
    r = run_cli(["--db", db_url, "verify", str(good["dir"]), "--verifier",
                 str(good["verifier"]), "--functional"])
    assert r.code == 2 and "--data" in r.err
    r = run_cli(["--db", db_url, "verify", str(good["dir"]), "--verifier",
                 str(good["verifier"]), "--gate", "min_acceptance_length=lots"])
    assert r.code == 2 and "not a number" in r.err
    r = run_cli(["--db", db_url, "verify", str(good["dir"]), "--verifier",
                 str(good["verifier"]), "--todo", "t9"])
    assert r.code == 1 and "unknown todo t9" in r.err


def test_without_torch_the_error_says_what_to_install(good, tmp_path, db_url):
    """A Python without the eagle3 extra: the message names the extra, nothing runs."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'safetensors'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Hide())\n")
    from tests.conftest import ROOT

    proc = harness_subprocess(["--db", db_url, "verify", str(good["dir"]), "--verifier",
                               str(good["verifier"])],
                              env={"PYTHONPATH": f"{hide}:{ROOT}"})
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "todo-harness[eagle3]" in err and "torch" in err and len(err.splitlines()) == 1
    assert sys.executable  # the same interpreter, only the packages hidden


def test_placement_flags_reach_the_functional_checks(good, tmp_path, db_url):
    """A verifier spread over CPU memory and disk by --max-memory measures what it measures
    on one device; a map that is not JSON is one line naming the flag, and nothing is
    recorded."""
    common = ["--db", db_url, "verify", str(good["dir"]), "--verifier", str(good["verifier"]),
              "--data", str(good["prompts"]), "--exclude", str(good["exclude"]),
              "--samples", "2", "--max-new-tokens", "16", "--device", "cpu", "--json"]
    one = run_cli(common)
    assert one.code == 0, one.err
    spread = run_cli([*common, "--max-memory", '{"cpu": "700KB"}',
                      "--offload-folder", str(tmp_path / "offload")])
    assert spread.code == 0, spread.err
    a, b = (json.loads(r.out)["result"]["metrics"] for r in (one, spread))
    assert "disk" in json.dumps(b["memory_plan"]) and "disk" not in json.dumps(a["memory_plan"])
    for key in ("tau", "acceptance_per_position", "teacher_forced_tau", "generated_tokens"):
        assert a[key] == b[key], key

    bad = run_cli([*common, "--max-memory", "{cpu: lots}"])
    assert bad.code == 1 and bad.out == ""
    lines = bad.err.strip().splitlines()
    assert len(lines) == 1 and "--max-memory" in lines[0] and "Traceback" not in bad.err
    with Store.open(db_url) as store:
        assert len(store.verifications()) == 2
