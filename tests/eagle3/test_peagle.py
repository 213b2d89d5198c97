"""P-EAGLE (``train --method peagle``): the mask token's choice, parallel training offline
and online, the speculators ``peagle`` export vLLM 0.26.0 reads, and the refusals."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from pipeline.eagle3 import export, train
from pipeline.eagle3.export import round_trip_max_diff
from pipeline.eagle3.model.drafter import load_drafter
from pipeline.eagle3.model.peagle import (
    choose_mask_token,
    drafter_input_counts,
    resolve_mask_token,
    special_tokens,
)
from pipeline.errors import ActionError

from .conftest import TRAIN_PARAMS, ok, run_stage

pytestmark = pytest.mark.ml

PEAGLE = {**TRAIN_PARAMS, "method": "peagle"}


@pytest.fixture(scope="module")
def peagle_run(tiny_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("peagle")
    result = ok(train, root, hidden_states=tiny_data["hidden"], verifier=tiny_data["verifier"],
                vocab=tiny_data["vocab"], out=root / "run", **PEAGLE)
    return {"dir": root / "run", "result": result, "root": root}


def test_the_mask_token_is_the_special_token_the_drafter_reads_least():
    # two samples [5, 0, 1, 2], [0, 1, 1]: a sample's first token is no drafter input
    ids = torch.tensor([5, 0, 1, 2, 0, 1, 1])
    counts = drafter_input_counts(ids, torch.tensor([0, 4, 7]), 8)
    assert counts.tolist() == [1, 3, 1, 0, 0, 0, 0, 0]
    specials = {0: "<s>", 1: "<a>", 2: "<b>", 3: "<pad>", 6: "<r>"}
    assert choose_mask_token(counts, specials)[0] == 6   # unread; the highest id on a tie
    assert choose_mask_token(counts, {0: "<s>", 1: "<a>"})[0] == 0
    chosen, why = choose_mask_token(counts, {})
    assert chosen == 7 and "the tokenizer declares no special token" in why


def test_the_tokenizers_special_tokens_and_an_explicit_id(tiny_data):
    vocab = json.loads((tiny_data["verifier"] / "config.json").read_text())["vocab_size"]
    specials = special_tokens(tiny_data["verifier"], vocab)
    assert specials == {0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>"}
    with pytest.raises(ActionError, match=rf"--mask-token-id {vocab} is not a token of the "
                                          rf"verifier \(0\.\.{vocab - 1}\)"):
        resolve_mask_token(vocab, vocab, tiny_data["verifier"], lambda: None)
    assert resolve_mask_token(7, vocab, tiny_data["verifier"], lambda: None)[0] == 7


def test_parallel_training_records_its_mask_token_and_per_position_accuracy(peagle_run,
                                                                            tiny_trained):
    m = peagle_run["result"].metrics
    assert m["method"] == "peagle" and m["mask_token_id"] == 0
    assert "'<|endoftext|>' (id 0)" in m["mask_token_choice"]
    assert [h["epoch"] for h in m["history"]] == [1, 2] and m["epoch_seconds"] > 0
    accs = [m[f"heldout_acc_pos{k}"] for k in (1, 2, 3)]
    assert accs[0] > 0.2 and all(0.0 <= a <= 1.0 for a in accs)
    assert "P-EAGLE" in peagle_run["result"].summary
    ckpt = peagle_run["dir"] / "checkpoints" / "epoch-002"
    cfg = json.loads((ckpt / "drafter_config.json").read_text())
    assert (cfg["method"], cfg["mask_token_id"]) == ("peagle", 0)
    assert load_file(str(ckpt / "model.safetensors"))["mask_hidden"].shape == (1, 1, 192)
    # the config record of an EAGLE-3 run has neither key: runs made before resume
    guarded = json.loads((tiny_trained["dir"] / ".config.json").read_text())["config"]
    assert "method" not in guarded and "mask_token_id" not in guarded
    assert guarded["step_decay"] == 0.8
    mine = json.loads((peagle_run["dir"] / ".config.json").read_text())["config"]
    assert (mine["method"], mine["mask_token_id"], mine["step_decay"]) == ("peagle", 0, 1.0)


def test_online_parallel_training_starts_where_offline_does(tiny_data, peagle_run, tmp_path):
    """The same first batch and states: the same first-step loss, and the same mask token
    chosen from the tokens file as from the shards."""
    result = ok(train, tmp_path, online=True, tokens=tiny_data["tokens"],
                verifier=tiny_data["verifier"], vocab=tiny_data["vocab"], out=tmp_path / "run",
                **{**PEAGLE, "epochs": 1})
    offline = peagle_run["result"].metrics
    assert result.metrics["mask_token_id"] == offline["mask_token_id"]
    assert result.metrics["first_step_loss"] == pytest.approx(offline["first_step_loss"],
                                                              rel=1e-4)


def test_the_export_is_the_speculators_peagle_config_vllm_reads(peagle_run, tiny_data,
                                                                 tmp_path):
    out = tmp_path / "drafter"
    result = ok(export, tmp_path, checkpoint=peagle_run["dir"], out=out, dtype="float32")
    assert result.metrics["format"] == "speculators" and result.metrics["mask_token_id"] == 0
    assert result.metrics["round_trip_max_abs_diff"] == 0.0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["PEagleSpeculator"]
    assert cfg["speculators_model_type"] == "peagle"
    assert cfg["speculators_config"]["algorithm"] == "peagle"
    assert (cfg["mask_token_id"], cfg["norm_before_fc"], cfg["norm_before_residual"]) == (
        0, False, False)
    assert "<|endoftext|>" in cfg["eagle3_training"]["mask_token_choice"]
    tensors = load_file(str(out / "model.safetensors"))
    assert tensors["mask_hidden"].shape == (1, 1, 192)
    reference = load_drafter(peagle_run["dir"] / "checkpoints" / "epoch-002")
    loaded = load_drafter(out, embed_from=tiny_data["verifier"])
    assert loaded.config.parallel and loaded.config.mask_token_id == 0
    assert torch.equal(loaded.mask_hidden, reference.mask_hidden)
    assert round_trip_max_diff(reference, loaded, seed=3) == 0.0


def test_refusals(peagle_run, tiny_data, tmp_path):
    rc, result = run_stage(export, tmp_path, checkpoint=peagle_run["dir"], out=tmp_path / "e",
                           format="eagle")
    assert rc == 1 and "a P-EAGLE drafter exports as speculators only" in result.error
    rc, result = run_stage(train, tmp_path, hidden_states=tiny_data["hidden"],
                           verifier=tiny_data["verifier"], vocab=tiny_data["vocab"],
                           out=tmp_path / "t", mask_token_id=3, **TRAIN_PARAMS)
    assert rc == 1 and result.error == "--mask-token-id is for --method peagle"
    rc, result = run_stage(train, tmp_path, hidden_states=tiny_data["hidden"],
                           verifier=tiny_data["verifier"], out=tmp_path / "w",
                           init_from=peagle_run["dir"] / "checkpoints" / "epoch-001",
                           **TRAIN_PARAMS)
    assert rc == 1 and "the warm-start drafter is a peagle drafter, this run trains eagle3" \
        in result.error
    assert not (tmp_path / "t" / "state.json").exists()
