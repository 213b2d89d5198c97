"""P-EAGLE verified: the speculators peagle export of the good data passes every layer with
the reference loop drafting in parallel (lossless, better than untrained and than its first
epoch); a broken one fails the check built for what it breaks; and the pipeline's P-EAGLE
end (train online, export, verify with a gate) through `harness run`, at test size, as
examples/peagle-tiny.yaml runs it."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml
from safetensors.torch import load_file, save_file

from state.store import Store
from tests.conftest import ROOT, run_cli

from .conftest import checks, run_verify, verify_params

pytestmark = pytest.mark.ml


def test_the_peagle_export_verifies_drafting_in_parallel(good, tmp_path):
    rc, result = run_verify(tmp_path, verify_params(
        good, good["peagle"], previous=good["peagle_train"] / "checkpoints" / "epoch-001"))
    c = checks(result)
    assert rc == 0, [(n, x.message) for n, x in c.items() if not x.passed]
    m = result.metrics
    assert (m["format"], m["method"], m["mask_token_id"]) == ("speculators", "peagle", 0)
    assert c["architecture"].message == "speculators format, P-EAGLE (parallel drafting)"
    assert "chosen in training: '<|endoftext|>' (id 0)" in c["mask_token"].message
    assert c["vllm_weights"].value["checkpoint"] == 12   # the table: mask_hidden too
    # the loop drafts a round in one forward and stays exact, for every drafter it runs
    assert "checkpoint, untrained, previous" in c["lossless"].message
    assert m["acceptance_length"] >= m["untrained_acceptance_length"] + 0.5
    assert m["acceptance_length"] >= m["previous_acceptance_length"] - 0.05
    # one forward drafts the round: its per-position figures decline with depth
    assert len(m["acceptance_per_position"]) == 3 and m["draft_ms_per_round"] > 0
    assert abs(m["tau"] - m["teacher_forced_tau"]) <= 0.3
    assert "at k=3 (P-EAGLE: parallel drafting); pos1" in result.summary


def _broken(good, tmp_path, name, tensors=None, config=None):
    d = tmp_path / name
    shutil.copytree(good["peagle"], d)
    if tensors:
        t = load_file(str(d / "model.safetensors"))
        tensors(t)
        save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    if config:
        cfg = json.loads((d / "config.json").read_text())
        config(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return d


BROKEN = {
    # vLLM refuses to load a parallel drafter without it
    "no_mask_hidden": (lambda t: t.pop("mask_hidden"), None, ["keys", "vllm_weights"],
                       "mask_hidden"),
    "mask_hidden_size": (lambda t: t.update(mask_hidden=t["mask_hidden"][..., :64]), None,
                         ["shapes"], "mask_hidden [1, 1, 64] holds 64 values, not the 192"),
    # vLLM's reader raises KeyError without it
    "no_mask_token": (None, lambda c: c.pop("mask_token_id"), ["mask_token"],
                      "no mask_token_id: vLLM's peagle reader requires it"),
    "mask_token_outside": (None, lambda c: c.update(mask_token_id=100000), ["mask_token"],
                           "mask_token_id 100000 is outside the verifier's vocabulary"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_peagle_export_fails_its_check(good, tmp_path, name):
    tensors, config, failing, says = BROKEN[name]
    d = _broken(good, tmp_path, name, tensors, config)
    rc, result = run_verify(tmp_path, verify_params(good, d, functional=False))
    failed = {n: x for n, x in checks(result).items() if not x.passed}
    assert rc == 1 and sorted(failed) == sorted(failing), failed
    assert says in failed[failing[0]].message


def test_a_peagle_export_without_its_mask_token_does_not_load_as_vllm_would(good, tmp_path):
    d = _broken(good, tmp_path, "no_mask_token", None, lambda c: c.pop("mask_token_id"))
    rc, result = run_verify(tmp_path, verify_params(good, d))
    loads = checks(result)["loads"]
    assert rc == 1 and not loads.passed
    assert "mask_token_id None is not a token of the verifier" in loads.message


def test_peagle_tiny_is_the_main_job_with_the_peagle_drafter():
    """examples/peagle-tiny.yaml is examples/eagle3-tiny.yaml but for the drafter's
    method (and the epochs it needs), its export format and the names saying so."""
    tiny = yaml.safe_load((ROOT / "examples" / "eagle3-tiny.yaml").read_text())
    peagle = yaml.safe_load((ROOT / "examples" / "peagle-tiny.yaml").read_text())
    assert peagle["pipeline"] == "peagle-tiny"
    assert peagle["hosts"]["local"]["workdir"] == "runs/peagle-tiny"
    a = {s["name"]: s for s in tiny["stages"]}
    b = {s["name"]: s for s in peagle["stages"]}
    assert list(a) == list(b)
    for name in a:
        if name not in ("train", "export"):
            assert {**a[name], "todo": ""} == {**b[name], "todo": ""}, name
    assert b["train"]["with"] == {**a["train"]["with"], "method": "peagle",
                                  "epochs": b["train"]["with"]["epochs"]}
    assert b["export"]["with"] == {**a["export"]["with"], "format": "speculators"}


@pytest.mark.sqlite
def test_the_peagle_end_of_the_pipeline_through_harness_run(good, tmp_path, db_url):
    """train (online, method peagle) -> export -> verify with a gate, as the runner runs
    peagle-tiny's last stages, on the good data at test size."""
    work = tmp_path / "work"
    verify_with = {"checkpoint": "drafter", "verifier": str(good["verifier"]),
                   "data": str(good["prompts"]), "exclude": str(good["exclude"]),
                   "samples": 4, "max_new_tokens": 32, "k": 3, "device": "cpu", "threads": 1,
                   "previous": "train/checkpoints/epoch-001", "probe": False}
    spec = tmp_path / "peagle.yaml"
    spec.write_text(yaml.safe_dump({
        "pipeline": "peagle-test", "hosts": {"local": {"workdir": str(work)}},
        "stages": [
            {"name": "train", "action": "eagle3.train",
             "with": {"method": "peagle", "online": True, "tokens": str(good["tokens"]),
                      "verifier": str(good["verifier"]), "vocab": str(good["vocab"]),
                      "out": "train", "epochs": 3, "ttt_steps": 3, "lr": 0.003,
                      "batch_size": 16, "batch_tokens": 2048, "holdout": 0.1,
                      "device": "cpu", "log_every": 1000}},
            {"name": "export", "needs": ["train"], "action": "eagle3.export",
             "with": {"checkpoint": "train", "out": "drafter", "dtype": "bfloat16"}},
            {"name": "verify", "needs": ["export"], "action": "eagle3.verify",
             "with": verify_with,
             "gate": {"min_acceptance_length": 1.3, "min_position_acceptance": 0.5}}]},
        sort_keys=False))
    r = run_cli(["--db", db_url, "run", str(spec), "--quiet"])
    assert r.code == 0, r.err
    cfg = json.loads((work / "drafter" / "config.json").read_text())
    assert cfg["speculators_model_type"] == "peagle" and cfg["mask_token_id"] == 0
    with Store.open(db_url) as store:
        sid = store.session_by_name("default").id
        todos = {t.stage: t for t in store.todos(sid)}
        assert all(t.status == "completed" for t in todos.values())
        (row,) = [v for v in store.verifications(sid) if v.kind == "eagle3.verify"]
        assert row.passed and row.metrics["method"] == "peagle"
        assert re.search(r"acceptance \d+% \(τ \d\.\d\d\) at k=3 \(P-EAGLE: parallel "
                         r"drafting\)", row.verdict), row.verdict
        notes = [e.payload["text"] for e in store.events(sid, todo_id=todos["verify"].num,
                                                         kinds=["todo.noted"])]
        assert len(notes) == 1 and "gate passed: acceptance_length" in notes[0]
