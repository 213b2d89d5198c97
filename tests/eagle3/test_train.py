"""train: accuracy reporting, resume == uninterrupted, the config guard, warm start."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from pipeline.eagle3 import export, train, vocab
from pipeline.eagle3.model.drafter import load_drafter
from pipeline.series import parse

from .conftest import TRAIN_PARAMS, ok, run_stage

pytestmark = pytest.mark.ml


def weights(run_dir, epoch):
    return load_file(str(run_dir / "checkpoints" / f"epoch-{epoch:03d}" / "model.safetensors"))


def test_training_reports_per_position_accuracy(tiny_trained):
    m = tiny_trained["result"].metrics
    history = m["history"]
    assert [h["epoch"] for h in history] == [1, 2]
    assert history[1]["train_loss"] < history[0]["train_loss"]
    accs = [m[f"heldout_acc_pos{k}"] for k in (1, 2, 3)]
    assert all(0.0 <= a <= 1.0 for a in accs)
    assert accs[0] > 0.2  # far above chance over a 128-token draft vocab
    state = json.loads((tiny_trained["dir"] / "state.json").read_text())
    assert state["epoch"] == 2 and state["checkpoint"] == "checkpoints/epoch-002"


def points(out: str) -> list:
    """The series points a stage printed (pipeline.series)."""
    return [p for p in map(parse, out.splitlines()) if p is not None]


def test_resume_gives_the_uninterrupted_result(tiny_trained, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_SERIES", "1")  # as inside a harness job
    common = dict(hidden_states=tiny_trained["hidden"], verifier=tiny_trained["verifier"],
                  vocab=tiny_trained["vocab"], out=tmp_path / "run", **TRAIN_PARAMS)
    first = ok(train, tmp_path, **common, stop_after_epochs=1)
    assert first.metrics["epochs_done"] == 1
    assert not (tmp_path / "run" / "checkpoints" / "epoch-002").exists()
    before = points(capsys.readouterr().out)
    resumed = ok(train, tmp_path, **common)
    assert resumed.metrics["epochs_done"] == 2
    # the curves: per step, per epoch; the resumed run records the epoch it resumed from
    after = points(capsys.readouterr().out)
    assert [p.metric for p in before] == ["loss", "lr", "tokens_per_s", "heldout_acc",
                                          "heldout_acc", "heldout_acc",
                                          "est_acceptance_length", "train_loss"]
    acc = [(p.x, p.labels["position"], p.y) for p in after if p.metric == "heldout_acc"]
    assert [a[:2] for a in acc] == [(e, k) for e in (1, 2) for k in (1, 2, 3)]
    assert acc[:3] == [(p.x, p.labels["position"], p.y) for p in before
                       if p.metric == "heldout_acc"]
    assert [h["heldout_acc"] for h in resumed.metrics["history"]] == [
        [a[2] for a in acc[:3]], [a[2] for a in acc[3:]]]
    first_steps = [p.x for p in before if p.metric == "loss"]
    later_steps = [p.x for p in after if p.metric == "loss"]
    assert first_steps and later_steps and min(later_steps) > max(first_steps)
    a, b = weights(tiny_trained["dir"], 2), weights(tmp_path / "run", 2)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    for got, want in zip(resumed.metrics["history"], tiny_trained["result"].metrics["history"],
                         strict=True):
        assert (got["train_loss"], got["heldout_acc"]) == (want["train_loss"],
                                                           want["heldout_acc"])


def test_resume_under_another_configuration_is_refused(tiny_trained, tmp_path):
    rc, result = run_stage(train, tmp_path, hidden_states=tiny_trained["hidden"],
                           verifier=tiny_trained["verifier"], vocab=tiny_trained["vocab"],
                           out=tiny_trained["dir"], **{**TRAIN_PARAMS, "lr": 0.001})
    assert rc == 1
    assert result.error.startswith(f"{tiny_trained['dir'] / '.config.json'}: ")
    assert "changed: lr" in result.error
    assert "pass on_other_config: restart to discard them" in result.error


def test_on_other_config_restart_discards_the_earlier_run_and_trains_anew(tiny_trained,
                                                                          tmp_path):
    # a first run under one lr, then the same OUT under another: refused by default,
    # started over with on_other_config: restart, whose result equals a fresh run's
    common = dict(hidden_states=tiny_trained["hidden"], verifier=tiny_trained["verifier"],
                  vocab=tiny_trained["vocab"], **{**TRAIN_PARAMS, "epochs": 1})
    ok(train, tmp_path, **common, out=tmp_path / "run")
    other = {**common, "lr": common["lr"] * 0.5}
    again = ok(train, tmp_path, **other, out=tmp_path / "run", on_other_config="restart")
    fresh = ok(train, tmp_path, **other, out=tmp_path / "fresh")
    assert again.metrics["history"][0]["train_loss"] == \
        fresh.metrics["history"][0]["train_loss"]
    a, b = weights(tmp_path / "run", 1), weights(tmp_path / "fresh", 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the same settings again: resumed (nothing to train), not discarded
    kept = ok(train, tmp_path, **other, out=tmp_path / "run", on_other_config="restart")
    assert kept.metrics["epochs_done"] == 1
    assert (tmp_path / "run" / "checkpoints" / "epoch-001").is_dir()


@pytest.fixture(scope="module")
def exported(tiny_trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "drafter"
    ok(export, out.parent, checkpoint=tiny_trained["dir"], out=out, format="eagle",
       dtype="float32")
    return out


def test_warm_start_refuses_a_mapping_that_differs(tiny_trained, exported, tmp_path):
    other = tmp_path / "other.safetensors"
    ok(vocab, tmp_path, freqs=tiny_trained["tokens"], verifier=tiny_trained["verifier"],
       draft_vocab=100, out=other)
    rc, result = run_stage(train, tmp_path, hidden_states=tiny_trained["hidden"],
                           verifier=tiny_trained["verifier"], vocab=other, init_from=exported,
                           out=tmp_path / "warm", **{**TRAIN_PARAMS, "epochs": 1})
    assert rc == 1
    assert result.error.startswith(f"{other}: the vocab mapping differs from the warm-start")
    assert "frozen lm_head" in result.error
    assert not (tmp_path / "warm" / "state.json").exists()


def test_warm_start_keeps_the_drafters_own_mapping_and_weights(tiny_trained, exported,
                                                               tmp_path):
    original = load_drafter(exported)
    # Its own mapping passed explicitly is fine; lr ~0 so the weights must come through.
    ok(train, tmp_path, hidden_states=tiny_trained["hidden"], verifier=tiny_trained["verifier"],
       vocab=tiny_trained["vocab"], init_from=exported, out=tmp_path / "warm",
       **{**TRAIN_PARAMS, "epochs": 1, "lr": 1e-12})
    warm = load_drafter(tmp_path / "warm" / "checkpoints" / "epoch-001")
    assert torch.equal(warm.d2t, original.d2t) and torch.equal(warm.t2d, original.t2d)
    assert torch.equal(warm.lm_head.weight, original.lm_head.weight)
    torch.testing.assert_close(warm.fc.weight, original.fc.weight, rtol=0, atol=1e-6)
    # the frozen embeddings came from the verifier, as the exported dir has none
    assert warm.embed_tokens.weight.abs().sum() > 0


def test_ddp_on_two_cpu_processes(tiny_trained, tmp_path):
    """torchrun with gloo: two ranks split the batches and stay in step."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from pipeline.actions import params_to_argv, read_result

    root = Path(__file__).resolve().parents[2]
    result_path = tmp_path / "ddp.json"
    params = dict(hidden_states=tiny_trained["hidden"], verifier=tiny_trained["verifier"],
                  vocab=tiny_trained["vocab"], out=tmp_path / "run", **TRAIN_PARAMS)
    with socket.socket() as sock:  # torchrun's static rendezvous cannot take port 0
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "pipeline.eagle3.train", *params_to_argv(params),
           "--result", str(result_path)]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=200)
    # The head holds a rank's own last words (e.g. "terminate called ..."), the tail torchrun's.
    assert proc.returncode == 0, proc.stderr[:1500] + "\n[...]\n" + proc.stderr[-1500:]
    result = read_result(result_path)
    assert result.ok and result.metrics["world_size"] == 2
    assert {c.name: c.passed for c in result.checks}["ranks_in_sync"]
    single = tiny_trained["result"].metrics["history"][0]
    assert "world 2" in proc.stdout and proc.stdout.count("[train] checkpoint") == 2
    assert result.metrics["history"][1]["train_loss"] < result.metrics["history"][0]["train_loss"]
    assert single["train_loss"] != result.metrics["history"][0]["train_loss"]  # other batches


def test_a_diverged_run_stops_at_the_first_progress_line(tiny_trained, tmp_path):
    # lr 1e30 takes the weights past any finite loss on the first optimizer step: the stage
    # must stop at the first progress point, not train on NaN through every epoch
    rc, result = run_stage(train, tmp_path, hidden_states=tiny_trained["hidden"],
                           verifier=tiny_trained["verifier"], vocab=tiny_trained["vocab"],
                           out=tmp_path / "run", **{**TRAIN_PARAMS, "lr": 1e30,
                                                    "log_every": 1})
    assert rc == 1
    assert "training diverged: the loss is not finite by epoch 1 step " in result.error
    assert not (tmp_path / "run" / "checkpoints" / "epoch-001").exists()
