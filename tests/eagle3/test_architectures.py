"""The seed's architecture (DeepSeek-V3 / Kimi-K2: MLA, routed experts) and Qwen3 through
every verifier-side stage: generate -> tokenize -> hidden_states -> vocab -> train -> export
-> verify, on tiny models built from their configs (no download)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from harness.gates import gate_items
from pipeline.eagle3 import generate, verify
from pipeline.eagle3.model.drafter import load_drafter, verifier_matrix
from pipeline.eagle3.states.shards import ShardReader, list_shards
from pipeline.spec.load import load_spec
from pipeline.spec.params import check_params

from .conftest import VERIFY_SMALL, ok, run_stage

pytestmark = pytest.mark.ml
ROOT = Path(__file__).resolve().parents[2]

ARCHS = ["deepseek_v3", "qwen3"]


def test_deepseek_verifier_is_kimi_shaped(arch_pipeline):
    d = arch_pipeline("deepseek_v3")
    cfg = json.loads((d["verifier"] / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"]
    assert cfg["q_lora_rank"] and cfg["kv_lora_rank"]  # LoRA-ranked q and kv (MLA)
    assert cfg["first_k_dense_replace"] == 1 and cfg["n_shared_experts"] == 1
    assert cfg["n_routed_experts"] == 4 and cfg["num_experts_per_tok"] == 2
    # the router as DeepSeek-V3/Kimi-K2 name it, so vLLM builds the same one
    assert (cfg["topk_method"], cfg["scoring_func"]) == ("noaux_tc", "sigmoid")
    model = AutoModelForCausalLM.from_pretrained(str(d["verifier"]))
    layers = model.model.layers
    assert hasattr(layers[0].mlp, "gate_proj") and not hasattr(layers[0].mlp, "experts")
    assert hasattr(layers[1].mlp, "experts") and hasattr(layers[1].mlp, "shared_experts")
    assert hasattr(layers[0].self_attn, "kv_a_proj_with_mqa")


def test_qwen3_head_dim_is_its_own(arch_pipeline):
    cfg = json.loads((arch_pipeline("qwen3")["verifier"] / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["head_dim"] * cfg["num_attention_heads"] != cfg["hidden_size"]


@pytest.mark.parametrize("arch", ARCHS)
def test_aux_and_last_equal_output_hidden_states(arch_pipeline, arch):
    d = arch_pipeline(arch)
    model = AutoModelForCausalLM.from_pretrained(str(d["verifier"])).eval()
    index, shards = list_shards(d["hidden"])
    aux_layers = index["aux_layers"]
    assert aux_layers == [2, 3, 4]
    hidden = model.config.hidden_size
    reader = ShardReader(shards[0].path)
    for j in (0, reader.num_samples - 1):
        sample = reader.sample(j)
        with torch.no_grad():
            full = model(sample["input_ids"].long()[None], output_hidden_states=True)
        for n, k in enumerate(aux_layers):
            torch.testing.assert_close(sample["aux"][:, n * hidden:(n + 1) * hidden],
                                       full.hidden_states[k][0], rtol=1e-5, atol=1e-5)
        # the final norm's output: the verifier's logits are lm_head(last)
        torch.testing.assert_close(sample["last"], full.hidden_states[-1][0], rtol=1e-5,
                                   atol=1e-5)
        torch.testing.assert_close(model.lm_head(sample["last"]), full.logits[0], rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_drafter_takes_heads_rope_and_vocabulary(arch_trained, arch):
    d = arch_trained(arch)
    vcfg = json.loads((d["verifier"] / "config.json").read_text())
    drafter = load_drafter(d["train"] / "checkpoints" / "epoch-001")  # fp32, as trained
    cfg = drafter.config
    heads = vcfg["num_attention_heads"]
    assert cfg.num_attention_heads == heads
    if arch == "deepseek_v3":
        # MLA: one KV head per query head; the value width as head dim (not the config's
        # head_dim, which is MLA's rope part)
        assert vcfg["head_dim"] == vcfg["qk_rope_head_dim"]
        assert (cfg.num_key_value_heads, cfg.head_dim) == (heads, vcfg["v_head_dim"])
    else:
        assert (cfg.num_key_value_heads, cfg.head_dim) == (vcfg["num_key_value_heads"],
                                                            vcfg["head_dim"])
    rope = vcfg.get("rope_parameters") or {}
    assert cfg.rope_theta == float(vcfg.get("rope_theta", rope.get("rope_theta")))
    assert cfg.vocab_size == vcfg["vocab_size"] and cfg.target_hidden_size == vcfg["hidden_size"]
    assert cfg.target_architectures == vcfg["architectures"]
    ids = torch.arange(drafter.d2t.numel()) + drafter.d2t
    assert torch.equal(drafter.lm_head.weight, verifier_matrix(d["verifier"], "lm_head")[ids])
    assert torch.equal(drafter.embed_tokens.weight, verifier_matrix(d["verifier"], "embed"))
    exported = json.loads((d["drafter"] / "config.json").read_text())
    assert exported["head_dim"] == cfg.head_dim and exported["num_key_value_heads"] == \
        cfg.num_key_value_heads


@pytest.mark.parametrize("arch", ARCHS)
def test_verify_runs_the_functional_checks(arch_trained, arch, tmp_path):
    d = arch_trained(arch)
    _rc, result = run_stage(verify, tmp_path, checkpoint=d["drafter"], verifier=d["verifier"],
                           data=d["prompts"], **VERIFY_SMALL)
    assert result is not None and result.error is None, result
    checks = {c.name: c for c in result.checks}
    structural = result.metrics["check_layers"]["structural"]
    assert structural and all(checks[n].passed for n in structural), \
        [checks[n] for n in structural if not checks[n].passed]
    assert checks["lossless"].passed  # speculative output == plain greedy, MLA/MoE included
    assert checks["loads"].passed
    m = result.metrics
    assert m["k"] == 3 and m["tau"] >= 1.0
    # the reference loop's speed is reported under a name that says what it is
    assert isinstance(m["reference_speedup_bound"], float)
    assert isinstance(m["projected_speedup"], float) and "measured_speedup" not in m
    assert "not served" in m["metric_notes"]["reference_speedup_bound"]
    # every threshold of the H200 example's verify gate reads a metric the stage emits,
    # and none of them is a speed (speed is gated on the served benchmark)
    h200 = load_spec(ROOT / "examples" / "eagle3-h200.yaml").stage("verify")
    assert not any("speedup" in key for key in h200.gate.keys)
    assert all(i.value is not None for i in gate_items(h200.gate, m))


def test_h200_example_parameters_are_the_stages_own():
    spec = load_spec(ROOT / "examples" / "eagle3-h200.yaml")
    assert check_params(spec, "eagle3-h200.yaml") == []
    train_stage = spec.stage("train")
    assert train_stage.params["online"] is True and "hidden_states" not in train_stage.params
    assert spec.stage("verifier").params["layers"] == 18


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_with_the_architecture(arch_pipeline, arch, tmp_path):
    d = arch_pipeline(arch)
    res = ok(generate, tmp_path, prompts=d["prompts"], verifier=d["verifier"],
             out=tmp_path / "gen", samples=3, max_new_tokens=12, batch_size=2, device="cpu",
             expect_reasoning="no")
    assert res.metrics["samples"] == 3
    lines = (tmp_path / "gen" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["backend"] == "local" for x in lines)
