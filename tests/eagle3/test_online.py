"""train --online: the frozen verifier feeds the drafter batch by batch, nothing is stored;
same batches, first-step loss, resume and held-out evaluation as offline training."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from pipeline.eagle3 import train
from pipeline.eagle3.common import load_verifier, pick_device
from pipeline.eagle3.plan.disk_estimate import offline_bytes
from pipeline.eagle3.text.datafiles import read_tokens
from pipeline.eagle3.training.online import OnlineData
from pipeline.eagle3.training.train_data import TrainData

from .conftest import TRAIN_PARAMS, ok, run_stage

pytestmark = pytest.mark.ml


def weights(run_dir, epoch):
    return load_file(str(run_dir / "checkpoints" / f"epoch-{epoch:03d}" / "model.safetensors"))


@pytest.fixture(scope="module")
def online_run(tiny_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("online")
    result = ok(train, root, online=True, tokens=tiny_data["tokens"],
                verifier=tiny_data["verifier"], vocab=tiny_data["vocab"], out=root / "run",
                **TRAIN_PARAMS)
    return {"dir": root / "run", "result": result}


def test_online_batches_are_the_offline_batches(tiny_data):
    """The same split, the same batches, the same states (up to the batch composition's
    rounding): the verifier run now instead of read from shards."""
    offline = TrainData(tiny_data["hidden"], seed=0, holdout=0.1, max_length=4096)
    model = load_verifier(tiny_data["verifier"], pick_device("cpu"), torch.float32)
    vcfg = json.loads((tiny_data["verifier"] / "config.json").read_text())
    online = OnlineData(read_tokens(tiny_data["tokens"]), model, pick_device("cpu"),
                        offline.aux_layers, seed=0, holdout=0.1, max_length=4096,
                        dtype=torch.float32, verifier_config=vcfg)
    try:
        assert online.heldout == offline.heldout and online.train == offline.train
        for epoch in (0, 1):
            assert online.epoch_batches(epoch, 16, 2048) == offline.epoch_batches(epoch, 16,
                                                                                  2048)
        batch = offline.epoch_batches(0, 16, 2048)[0]
        a, b = offline.load(batch), online.load(batch)
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
        assert a.tokens == b.tokens
        torch.testing.assert_close(b.aux, a.aux, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(b.last, a.last, rtol=1e-5, atol=1e-5)
    finally:
        online.close()


def test_first_step_loss_equals_offline_and_no_shards(online_run, tiny_trained):
    on, off = online_run["result"].metrics, tiny_trained["result"].metrics
    assert on["data"] == "online" and off["data"] == "shards"
    assert on["first_step_loss"] == pytest.approx(off["first_step_loss"], rel=1e-5)
    # the whole run follows offline's (same batches, same schedule)
    for got, want in zip(on["history"], off["history"], strict=True):
        assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-3)
        assert got["heldout_acc"] == pytest.approx(want["heldout_acc"], abs=0.02)
    written = [p for p in online_run["dir"].rglob("*.safetensors")]
    assert written and all("checkpoints" in p.parts for p in written)
    tokens = int(read_tokens(tiny_trained["tokens"])["offsets"][-1])
    assert on["offline_bytes_avoided"] == offline_bytes(tokens, 64, 4) == tokens * 4 * 64 * 4
    assert on["memory_plan"]["fits"]


def test_online_resume_gives_the_uninterrupted_result(online_run, tiny_data, tmp_path):
    common = dict(online=True, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
                  vocab=tiny_data["vocab"], out=tmp_path / "run", **TRAIN_PARAMS)
    first = ok(train, tmp_path, **common, stop_after_epochs=1)
    assert first.metrics["epochs_done"] == 1
    resumed = ok(train, tmp_path, **common)
    assert resumed.metrics["epochs_done"] == 2
    a, b = weights(online_run["dir"], 2), weights(tmp_path / "run", 2)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert resumed.metrics["history"][1]["heldout_acc"] == \
        online_run["result"].metrics["history"][1]["heldout_acc"]
    # resuming online work offline (or the reverse) is another configuration
    rc, result = run_stage(train, tmp_path, hidden_states=tiny_data["hidden"],
                           verifier=tiny_data["verifier"], vocab=tiny_data["vocab"],
                           out=tmp_path / "run", **TRAIN_PARAMS)
    assert rc == 1 and "another configuration" in result.error


def test_online_through_a_device_map(online_run, tiny_data, tmp_path):
    """The verifier split between CPU memory and disk by --max-memory: the same loss."""
    res = ok(train, tmp_path, online=True, tokens=tiny_data["tokens"],
             verifier=tiny_data["verifier"], vocab=tiny_data["vocab"], out=tmp_path / "run",
             **{**TRAIN_PARAMS, "epochs": 1}, max_memory={"cpu": "400KB"},
             offload_folder=tmp_path / "offload")
    devices = {d["device"] for d in res.metrics["memory_plan"]["devices"]}
    assert devices == {"cpu", "disk"}
    assert res.metrics["first_step_loss"] == \
        online_run["result"].metrics["first_step_loss"]


@pytest.mark.parametrize("params,message", [
    ({"online": True}, "--online needs --tokens"),
    ({"online": True, "tokens": "T", "hidden_states": "H"}, "--online and --hidden-states "
                                                           "are exclusive"),
    ({}, "give --hidden-states (offline), or --online with --tokens"),
    ({"hidden_states": "H", "aux_layers": [1, 2, 3]}, "--tokens and --aux-layers are for "
                                                      "--online"),
])
def test_bad_online_flags(tiny_data, tmp_path, params, message):
    fill = {"T": tiny_data["tokens"], "H": tiny_data["hidden"]}
    params = {k: fill.get(v, v) if isinstance(v, str) else v for k, v in params.items()}
    rc, result = run_stage(train, tmp_path, verifier=tiny_data["verifier"],
                           vocab=tiny_data["vocab"], out=tmp_path / "run", **TRAIN_PARAMS,
                           **params)
    assert rc == 1 and message in result.error
    assert not (tmp_path / "run" / "state.json").exists()


def test_online_aux_layers_follow_the_rule(tiny_data, tmp_path):
    """Unsorted ids are sorted (and said once); a verifier whose default repeats an id is
    refused before anything loads."""
    rc, result = run_stage(train, tmp_path, online=True, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], vocab=tiny_data["vocab"],
                           out=tmp_path / "run", **{**TRAIN_PARAMS, "epochs": 1},
                           stop_after_epochs=1, aux_layers=[4, 2, 3])
    assert rc == 0
    cfg = json.loads((tmp_path / "run" / "checkpoints" / "epoch-001" /
                      "drafter_config.json").read_text())
    assert cfg["aux_layer_ids"] == [2, 3, 4]
    six = tmp_path / "six"
    shutil.copytree(tiny_data["verifier"], six)
    vcfg = json.loads((six / "config.json").read_text())
    (six / "config.json").write_text(json.dumps({**vcfg, "num_hidden_layers": 6}))
    rc, result = run_stage(train, tmp_path, online=True, tokens=tiny_data["tokens"],
                           verifier=six, vocab=tiny_data["vocab"], out=tmp_path / "run6",
                           **TRAIN_PARAMS)
    assert rc == 1
    assert result.error.startswith(f"{six / 'config.json'}: vLLM's default aux layers")
    assert "[2, 3, 3]" in result.error
