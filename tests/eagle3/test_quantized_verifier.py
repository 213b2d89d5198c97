"""Quantized verifiers in the transformers path: the shipped formats built from a tiny
verifier, loaded by transformers on the CPU, counted by the memory plan, refused where they
cannot run, and planned on paper for a Kimi-K2.5-shaped spec."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from pipeline.eagle3 import build_verifier as verifier
from pipeline.eagle3 import hidden_states
from pipeline.eagle3.hardware.memory_plan import Workload, memory_plan, plan_or_fail
from pipeline.eagle3.hardware.placement import Placement
from pipeline.eagle3.hardware.quant_formats import (
    dequantize_state,
    fp8_dequantize,
    fp8_quantize,
    int4_dequantize,
    int4_quantize,
    quant_format,
    stored_weight_bytes,
)
from pipeline.eagle3.hardware.quant_support import holding
from pipeline.eagle3.hardware.quantize_checkpoint import quantize_dir, read_state
from pipeline.eagle3.model.verifier_shapes import weight_shapes
from pipeline.errors import ActionError
from tests.conftest import run_cli

from .conftest import ok, run_stage

pytestmark = pytest.mark.ml
ROOT = Path(__file__).resolve().parents[2]
CPU = Placement(device=torch.device("cpu"))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A random llama and deepseek_v3 verifier, each as FP8 and INT4 with its bf16 twin."""
    root = tmp_path_factory.mktemp("quant")
    out: dict[str, Path] = {}
    for arch in ("llama", "deepseek_v3"):
        rc, res = run_stage(verifier, root, out=root / arch, arch=arch, steps=1,
                            train_samples=20, check_prompts=0, corpus_files=4,
                            vocab_size=300, layers=3, hidden_size=128, device="cpu")
        assert rc == 0, res
        out[arch] = root / arch
        for fmt in ("fp8", "int4"):
            name = f"{arch}-{fmt}"
            quantize_dir(root / arch, root / name, fmt, twin=root / f"{name}-twin",
                         int4_targets="all" if arch == "llama" else "experts")
            out[name], out[name + "-twin"] = root / name, root / f"{name}-twin"
    return out


def test_fp8_round_trip_within_e4m3():
    w = torch.randn(300, 200, generator=torch.Generator().manual_seed(0))
    q, s = fp8_quantize(w)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (3, 2) and s.dtype == torch.float32
    back = fp8_dequantize(q, s, torch.float32)
    # e4m3: 3 mantissa bits, relative rounding error at most 2^-4 per element (above the
    # block's subnormal range)
    big = w.abs() > w.abs().max() / 64
    assert ((back - w).abs()[big] / w.abs()[big]).max() <= 2 ** -4 + 1e-6


def test_int4_pack_layout():
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    packed, scale, shape = int4_quantize(w)
    assert packed.dtype == torch.int32 and packed.shape == (4, 8)
    assert scale.dtype == torch.bfloat16 and scale.shape == (4, 2)
    assert shape.tolist() == [4, 64]
    back = int4_dequantize(packed, scale, shape, torch.float32)
    q = torch.round(back / scale.float().repeat_interleave(32, 1))
    assert q.min() >= -8 and q.max() <= 7
    # the first value of a word sits in its low 4 bits, stored as q + 8
    assert int(packed[0, 0]) & 0xF == int(q[0, 0]) + 8
    # half a step, plus the bf16 rounding of the scale at the clamped end
    step = scale.float().repeat_interleave(32, 1)
    assert ((back - w).abs() <= 0.5 * step * (1 + 2 ** -7) * 8 / 7.5 + 1e-6).all()


@pytest.mark.parametrize("name", ["llama-fp8", "llama-int4", "deepseek_v3-fp8",
                                  "deepseek_v3-int4"])
def test_shipped_layout_and_config(models, name):
    cfg = json.loads((models[name] / "config.json").read_text())
    qc = cfg["quantization_config"]
    with safe_open(str(models[name] / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        if name.endswith("fp8"):
            assert qc == {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]}
            key = "model.layers.1.self_attn.o_proj.weight"
            assert f.get_tensor(key).dtype == torch.float8_e4m3fn
            assert key.replace(".weight", ".weight_scale_inv") in keys
            assert f.get_tensor("lm_head.weight").dtype == torch.bfloat16
        else:
            assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "pack-quantized"
            w = qc["config_groups"]["group_0"]["weights"]
            assert (w["num_bits"], w["group_size"], w["symmetric"], w["strategy"]) == \
                (4, 32, True, "group")
            if name.startswith("deepseek"):  # Kimi-K2.5: routed experts only
                assert "model.layers.1.mlp.experts.0.up_proj.weight_packed" in keys
                assert "model.layers.1.self_attn.o_proj.weight" in keys
                assert "model.layers.1.mlp.shared_experts.up_proj.weight" in keys
            else:
                assert "model.layers.1.self_attn.o_proj.weight_packed" in keys
    fmt = quant_format(cfg)
    assert fmt is not None and fmt.kind == ("fp8-block" if name.endswith("fp8") else "int4-pack")


@pytest.mark.parametrize("name", ["llama-fp8", "llama-int4", "deepseek_v3-fp8",
                                  "deepseek_v3-int4"])
def test_transformers_loads_them_on_the_cpu(models, name):
    """What transformers computes from the quantized checkpoint equals its dequantized twin:
    the builder's format is the one transformers (and compressed-tensors) read."""
    from transformers import AutoModelForCausalLM

    q = AutoModelForCausalLM.from_pretrained(str(models[name]), dtype=torch.bfloat16).eval()
    t = AutoModelForCausalLM.from_pretrained(str(models[name + "-twin"]),
                                             dtype=torch.bfloat16).eval()
    ids = torch.randint(0, 250, (2, 12))
    with torch.no_grad():
        a = q(ids, output_hidden_states=True).hidden_states
        b = t(ids, output_hidden_states=True).hidden_states
    for x, y in zip(a, b, strict=True):  # bf16 rounding of the dequantization apart
        assert float((x.float() - y.float()).norm() / y.float().norm()) < 2e-2
    # and the twin is the builder's dequantization of what is stored
    stored = read_state(models[name])
    dense = dequantize_state(stored, torch.bfloat16)
    twin = read_state(models[name + "-twin"])
    assert dense.keys() == twin.keys()
    assert all(torch.equal(dense[k], twin[k]) for k in twin)


def test_hidden_states_stage_on_a_quantized_verifier(tiny_data, tmp_path):
    """The stage itself, on FP8 and INT4 forms of the tiny pipeline's verifier: the shards
    equal those of the dequantized twin (on the CPU transformers computes dense)."""
    from pipeline.eagle3.states.shards import ShardReader, list_shards

    v = tiny_data["verifier"]
    got = {}
    for fmt in ("fp8", "int4"):
        qdir, tdir = tmp_path / fmt, tmp_path / f"{fmt}-twin"
        quantize_dir(v, qdir, fmt, twin=tdir, int4_targets="all")
        for which, d in (("q", qdir), ("t", tdir)):
            res = ok(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=d,
                     out=tmp_path / f"h-{fmt}-{which}", limit=12, device="cpu",
                     dtype="bfloat16")
            _index, shards = list_shards(tmp_path / f"h-{fmt}-{which}")
            got[(fmt, which)] = ShardReader(shards[0].path).sample(0)
            if which == "q":
                plan = res.metrics["memory_plan"]
                assert plan["quant"].startswith("FP8" if fmt == "fp8" else "INT4")
                assert plan["stored_bytes"] > 0
        for key in got[(fmt, "q")]:
            assert torch.equal(got[(fmt, "q")][key], got[(fmt, "t")][key]), key


def test_stored_bytes_of_the_formats():
    fp8 = quant_format({"quantization_config": {"quant_method": "fp8",
                                                "weight_block_size": [128, 128]}})
    name = "model.layers.3.mlp.down_proj.weight"
    # 7168 x 18432 e4m3 values plus one fp32 scale per 128 x 128 block
    assert stored_weight_bytes(fp8, name, (7168, 18432), 2) == 7168 * 18432 + 56 * 144 * 4
    assert stored_weight_bytes(fp8, "model.embed_tokens.weight", (1000, 64), 2) == 128000
    assert stored_weight_bytes(fp8, "model.layers.1.mlp.gate.weight", (384, 7168), 2) == \
        384 * 7168 * 2  # the router stays bf16
    int4 = quant_format(json.loads((ROOT / "examples" / "kimi-k25.config.json").read_text()))
    e = "model.layers.5.mlp.experts.17.up_proj.weight"
    assert stored_weight_bytes(int4, e, (2048, 7168), 2) == \
        2048 * 7168 // 2 + 2048 * 7168 // 32 * 2 + 16
    assert stored_weight_bytes(int4, "model.layers.5.self_attn.o_proj.weight",
                               (7168, 8192), 2) == 7168 * 8192 * 2


def test_memory_plan_counts_what_transformers_holds(models):
    """FP8 on the CPU is dequantized at load: the plan counts dense bytes and names the
    stored size; the held sizes match what the loaded model really holds."""
    from transformers import AutoModelForCausalLM

    for name in ("deepseek_v3-fp8", "llama-int4", "deepseek_v3-int4"):
        plan = memory_plan(models[name], torch.bfloat16, CPU, Workload(2, 16))
        twin = memory_plan(models[name + "-twin"], torch.bfloat16, CPU, Workload(2, 16))
        assert plan.quant and not twin.quant and plan.dense_held
        if name.endswith("fp8"):
            assert plan.devices[0].weight_bytes == twin.devices[0].weight_bytes
        stored = (models[name] / "model.safetensors").stat().st_size
        assert abs(plan.stored - stored) / stored < 0.02  # the file, less its header
        assert plan.stored < 0.75 * twin.devices[0].weight_bytes
        assert any("stored as" in line for line in plan.lines())
        m = AutoModelForCausalLM.from_pretrained(str(models[name]), dtype=torch.bfloat16)
        with torch.no_grad():
            m(torch.randint(0, 250, (1, 4)))  # compressed-tensors decompresses here
        held = sum(p.numel() * p.element_size() for p in [*m.parameters(), *m.buffers()])
        assert held == sum(v for k, v in plan.devices[0].weights.items())


def test_memory_plan_counts_fp8_as_stored_where_kept():
    """On a GPU that keeps FP8 (compute capability >= 8.9) the plan counts e4m3 values and
    fp32 block scales: here the holding is made as that GPU's would be."""
    from pipeline.eagle3.hardware.quant_support import STORED, Holding

    fmt = quant_format({"quantization_config": {"quant_method": "fp8",
                                                "weight_block_size": [128, 128]}})
    hold = Holding(fmt, STORED, "kept")
    parts = hold.bytes_by_dtype("model.layers.0.self_attn.q_proj.weight", (256, 384), 2,
                                "bfloat16")
    assert parts == {"float8_e4m3fn": 256 * 384, "float32": 2 * 3 * 4}
    fused = hold.bytes_by_dtype("model.layers.1.mlp.experts.gate_up_proj", (4, 256, 128), 2,
                                "bfloat16")
    assert fused == {"float8_e4m3fn": 4 * 256 * 128, "float32": 4 * 2 * 1 * 4}


def test_unsupported_format_is_refused_in_one_line(models, tmp_path):
    d = tmp_path / "awq"
    shutil.copytree(models["llama-int4"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ActionError) as e:
        plan_or_fail(d, torch.bfloat16, CPU, Workload(1, 8), print)
    text = str(e.value)
    assert "\n" not in text and "'awq'" in text and "--backend vllm" in text
    with pytest.raises(ActionError, match="--backend vllm"):
        holding(quant_format(cfg), torch.device("mps"))


def test_kimi_shaped_verifier_refused_by_the_hf_backend(tmp_path):
    """Kimi-K2.5 as it ships (config only): transformers would hold ~1.9 TiB of bf16, the
    stage stops before loading, in one line that points to --backend vllm."""
    d = tmp_path / "kimi"
    d.mkdir()
    shutil.copy(ROOT / "examples" / "kimi-k25.config.json", d / "config.json")
    with pytest.raises(ActionError) as e:
        plan_or_fail(d, torch.bfloat16, CPU, Workload(1, 4096, captured=4), lambda _l: None)
    text = str(e.value)
    assert "\n" not in text and "--backend vllm" in text
    assert "INT4 compressed-tensors" in text and "does not fit" in text


def test_shapes_match_transformers(models):
    from transformers import AutoConfig, AutoModelForCausalLM

    for arch in ("llama", "deepseek_v3"):
        cfg = json.loads((models[arch] / "config.json").read_text())
        with torch.device("meta"):
            m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(models[arch])))
        ours = sum(torch.Size(s).numel() for _, s in weight_shapes(cfg))
        assert ours == sum(p.numel() for p in m.parameters()) + sum(
            b.numel() for n, b in m.named_buffers() if "e_score_correction_bias" in n)
        stored = read_state(models[arch])
        assert dict(weight_shapes(cfg)) == {k: tuple(v.shape) for k, v in stored.items()}


def test_harness_check_plans_kimi_k25():
    out = run_cli(["check", str(ROOT / "examples" / "kimi-k25.yaml")])
    assert out.code == 0, out.err
    text = out.out
    assert "1026.4B params" in text and "594.2 GB stored" in text
    assert "plan: hidden_states: shards for offline training at most 1.2 TB" in text
    hs = [line for line in text.splitlines() if "plan: hidden_states (hidden_states)" in line]
    assert len(hs) == 4  # hf and vllm on each GPU size
    assert all("DOES NOT FIT" in line for line in hs if " hf " in line)
    assert any(" vllm x 141.0 GB" in line and ": fits" in line and " h at " in line
               for line in hs)
    assert "plan: on 8 x 141.0 GB: vllm can hold the verifier; the hf backend cannot: use " \
           "--backend vllm" in text
    assert "plan: on 8 x 80.0 GB: neither backend holds the verifier" in text
    js = run_cli(["check", "--json", str(ROOT / "examples" / "kimi-k25.yaml")])
    plan = json.loads(js.out)["campaign_plan"]
    assert plan["holds"]["141000000000"] == {"hf": False, "vllm": True}


def test_check_plan_with_a_missing_config_is_one_line(tmp_path):
    spec = (ROOT / "examples" / "kimi-k25.yaml").read_text().replace(
        "verifier_config: kimi-k25.config.json", "verifier_config: nowhere.json")
    (tmp_path / "k.yaml").write_text(spec)
    out = run_cli(["check", str(tmp_path / "k.yaml")])
    assert out.code != 0 and "nowhere.json" in out.err and "Traceback" not in out.err


def test_builder_cli_refuses_bad_input_in_one_line(models, tmp_path, capsys):
    from pipeline.eagle3.hardware import quantize_checkpoint

    rc = quantize_checkpoint.main(["--verifier", str(models["llama-fp8"]), "--format", "int4",
                                   "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "already quantized" in err and len(err.strip().splitlines()) == 1
    rc = quantize_checkpoint.main(["--verifier", str(tmp_path / "none"), "--format", "fp8",
                                   "--out", str(tmp_path / "o")])
    assert rc == 2 and "config.json" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_fp8_on_a_gpu_needs_its_kernel(monkeypatch):
    """The branches of what transformers holds on a GPU, with the capability and the
    kernel's availability given (this machine has no GPU): kept as stored at >= 8.9,
    dequantized below, refused in one line when the kernel cannot be had."""
    from pipeline.eagle3.hardware import quant_support

    fmt = quant_format({"quantization_config": {"quant_method": "fp8",
                                                "weight_block_size": [128, 128]}})
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _i=0: (9, 0))
    monkeypatch.setattr(quant_support, "_fp8_kernel_problem", lambda: None)
    assert holding(fmt, gpu).mode == quant_support.STORED
    monkeypatch.setattr(quant_support, "_fp8_kernel_problem",
                        lambda: "its finegrained-fp8 kernel is not available (offline)")
    with pytest.raises(ActionError) as e:
        holding(fmt, gpu)
    assert "FP8 block-scaled" in str(e.value) and "cuda:0" in str(e.value)
    assert "--backend vllm" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _i=0: (8, 0))
    assert holding(fmt, gpu).mode == quant_support.DENSE


def test_fp8_kernel_probe_without_the_kernels_package():
    """On this machine (no GPU, no `kernels` package) the probe names why, in one line."""
    from pipeline.eagle3.hardware.quant_support import _fp8_kernel_problem

    problem = _fp8_kernel_problem()
    pytest.importorskip("transformers.integrations.finegrained_fp8")
    try:
        import kernels  # noqa: F401
    except ImportError:
        assert problem and "kernel" in problem and "\n" not in problem
