"""export: both vLLM formats, their key and config names, and an exact round trip."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from pipeline.eagle3 import export
from pipeline.eagle3.export import round_trip_max_diff
from pipeline.eagle3.model.drafter import load_drafter
from pipeline.errors import ActionError

from .conftest import ok

pytestmark = pytest.mark.ml

LAYER_KEYS = {"hidden_norm.weight", "input_layernorm.weight", "post_attention_layernorm.weight",
              "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
              "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
              "mlp.down_proj.weight"}


@pytest.mark.parametrize("fmt,prefix,dtype", [("eagle", "midlayer.", "bfloat16"),
                                               ("speculators", "layers.0.", "float32")])
def test_export_round_trip(tiny_trained, tmp_path, fmt, prefix, dtype):
    out = tmp_path / fmt
    result = ok(export, tmp_path, checkpoint=tiny_trained["dir"], out=out, format=fmt,
                dtype=dtype)
    assert result.metrics["round_trip_max_abs_diff"] == 0.0
    keys = set(load_file(str(out / "model.safetensors")))
    assert keys == {prefix + k for k in LAYER_KEYS} | {"fc.weight", "norm.weight",
                                                       "lm_head.weight", "d2t", "t2d"}
    cfg = json.loads((out / "config.json").read_text())
    if fmt == "eagle":
        assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
        layer = cfg
    else:
        assert cfg["architectures"] == ["Eagle3Speculator"]
        assert cfg["speculators_model_type"] == "eagle3"
        assert cfg["speculators_config"]["verifier"]["name_or_path"] == str(
            tiny_trained["verifier"])
        assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 3
        layer = cfg["transformer_layer_config"]
    assert cfg["draft_vocab_size"] == 128 and cfg["target_hidden_size"] == 64
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 3, 4]
    assert cfg["norm_before_residual"] is False
    target = json.loads((tiny_trained["verifier"] / "config.json").read_text())
    assert (layer["num_hidden_layers"], layer["vocab_size"], layer["hidden_size"]) == (
        1, target["vocab_size"], 64)

    # Independent of the stage's own check: reload and compare with the checkpoint.
    reference = load_drafter(tiny_trained["dir"] / "checkpoints" / "epoch-002",
                             dtype=getattr(torch, dtype))
    loaded = load_drafter(out, embed_from=tiny_trained["verifier"])
    assert loaded.fc.weight.dtype == getattr(torch, dtype)
    assert torch.equal(loaded.embed_tokens.weight, reference.embed_tokens.weight)
    assert round_trip_max_diff(reference, loaded, seed=5) == 0.0


def test_a_real_difference_is_caught(tiny_trained, tmp_path):
    out = tmp_path / "e"
    ok(export, tmp_path, checkpoint=tiny_trained["dir"], out=out, dtype="float32")
    reference = load_drafter(out)
    broken = load_drafter(out)
    with torch.no_grad():
        broken.midlayer.mlp.down_proj.weight[0, 0] += 1e-3
    assert round_trip_max_diff(reference, broken) > 0.0


def test_an_export_without_d2t_is_refused(tiny_trained, tmp_path):
    out = tmp_path / "e"
    ok(export, tmp_path, checkpoint=tiny_trained["dir"], out=out, dtype="float32")
    tensors = load_file(str(out / "model.safetensors"))
    del tensors["d2t"]
    save_file(tensors, str(out / "model.safetensors"))
    with pytest.raises(ActionError, match="no d2t tensor: vLLM would silently use an identity"):
        load_drafter(out)
