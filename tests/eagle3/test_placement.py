"""A verifier spread over several placements: accelerate's big-model placement from
``--device-map``/``--max-memory``, the memory plan printed before loading, and tensor
parallelism under torchrun.

On this CPU-only machine the honest split is CPU memory + disk: ``--max-memory`` (or a JSON
map) sends some decoder layers to ``disk`` and accelerate's hooks bring each one's weights
in for its forward, the same dispatch that moves activations between cuda:0 and the CPU on
a GPU host. The hidden states must equal the single-device run. Tensor parallelism runs for
real: two processes under torchrun on gloo.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline.eagle3 import generate, hidden_states, verify
from pipeline.eagle3.common import pick_device
from pipeline.eagle3.hardware.memory_plan import Workload, memory_plan
from pipeline.eagle3.hardware.placement import Placement, meta_model, placement_from_args
from pipeline.eagle3.states.shards import ShardReader, list_shards
from pipeline.errors import ActionError

from .conftest import VERIFY_SMALL, ok, run_stage

pytestmark = pytest.mark.ml
ROOT = Path(__file__).resolve().parents[2]
HS = {"shard_tokens": 4000, "batch_tokens": 2048, "device": "cpu", "dtype": "float32"}


def _args(**kw):
    base = {"device_map": None, "max_memory": None, "offload_folder": None, "tp_plan": None}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("kw,message", [
    ({"device_map": "everywhere"}, "--device-map 'everywhere': expected one of auto"),
    ({"device_map": "{not json"}, "--device-map is not valid JSON"),
    ({"device_map": '{"model.layers.0": "gpu7"}'}, "'gpu7' is not a device"),
    ({"max_memory": '{"0": "lots"}'}, "'lots' is not a size"),
    ({"max_memory": "[1, 2]"}, "--max-memory must be a JSON mapping"),
    ({"tp_plan": "auto"}, "--tp-plan auto needs several processes"),
    ({"tp_plan": "auto", "device_map": "auto"}, "--tp-plan and --device-map/--max-memory are "
                                                "exclusive"),
])
def test_bad_placement_flags_are_one_line_errors(kw, message):
    with pytest.raises(ActionError) as err:
        placement_from_args(_args(**kw), pick_device("cpu"))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_device_map_under_torchrun_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ActionError, match="would load a full verifier per rank"):
        placement_from_args(_args(device_map="auto"), pick_device("cpu"))


def test_sizes_and_devices_are_parsed():
    p = placement_from_args(_args(max_memory='{"cuda:1": "2GiB", "cpu": "1.5GB", "disk": 7}',
                                  device_map='{"model.layers.0": "cuda:0", "lm_head": "cpu"}'),
                            pick_device("cpu"))
    assert p.max_memory == {1: 2 << 30, "cpu": 1_500_000_000, "disk": 7}
    assert p.device_map == {"model.layers.0": 0, "lm_head": "cpu"}


def test_plan_counts_every_weight_once(tiny_verifier):
    v = tiny_verifier["dir"]
    model = meta_model(v, torch.float32)
    expected = sum(t.numel() * t.element_size() for t in
                   {id(t): t for t in [*model.parameters(), *model.buffers()]}.values())
    plan = memory_plan(v, torch.float32, Placement(device=pick_device("cpu")),
                       Workload(batch=4, seq=100, kv_tokens=150, logits_rows=1), model=model)
    (cpu,) = plan.devices
    assert cpu.device == "cpu" and cpu.layers == list(range(7))
    assert cpu.weight_bytes == expected and set(cpu.weights) == {"float32"}
    cfg = json.loads((v / "config.json").read_text())
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    # KV: 2 x kv heads x head dim x 4 bytes per token and layer, 4 x 150 tokens, 7 layers
    assert cpu.kv == 2 * cfg["num_key_value_heads"] * head_dim * 4 * 4 * 150 * 7
    assert cpu.activations > 0 and plan.fits


def test_a_plan_that_does_not_fit_names_the_numbers(tiny_data, tmp_path, capsys):
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], out=tmp_path / "h",
                           **{**HS, "batch_tokens": 10**12}, max_batch_size=10**9)
    assert rc == 1
    assert result.error.startswith("memory plan does not fit: cpu needs ")
    assert "weights" in result.error and "activations" in result.error
    assert "available" in result.error and "\n" not in result.error
    out = capsys.readouterr().out
    assert "[memory] verifier" in out and "DOES NOT FIT" in out
    assert not list((tmp_path / "h").glob("shard-*"))  # nothing loaded, nothing written


def test_weights_that_would_go_to_disk_need_an_offload_folder(tiny_data, tmp_path):
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], out=tmp_path / "h", **HS,
                           max_memory={"cpu": "100KB"})
    assert rc == 1
    assert result.error.startswith("the verifier does not fit the devices: ")
    assert "would go to disk" in result.error


def test_unknown_module_in_a_device_map(tiny_data, tmp_path):
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], out=tmp_path / "h", **HS,
                           device_map={"model.layers.99": "cpu", "": "cpu"})
    assert rc == 1 and "model.layers.99" in result.error


def _same_shards(a: Path, b: Path) -> int:
    _, sa = list_shards(a)
    _, sb = list_shards(b)
    assert len(sa) == len(sb)
    rows = 0
    for x, y in zip(sa, sb, strict=True):
        ra, rb = ShardReader(x.path), ShardReader(y.path)
        n = int(ra.offsets[-1])
        for key in ("aux", "last"):
            assert torch.equal(ra.rows(key, 0, n), rb.rows(key, 0, n)), (x.path, key)
        assert torch.equal(ra.input_ids, rb.input_ids)
        rows += n
    return rows


def test_split_over_cpu_and_disk_gives_the_single_device_states(arch_pipeline, tmp_path):
    """DeepSeek-V3 (MLA, routed experts) with --max-memory small enough that accelerate must
    put layers on disk: bit-identical hidden states (fp32)."""
    d = arch_pipeline("deepseek_v3")
    res = ok(hidden_states, tmp_path, tokens=d["tokens"], verifier=d["verifier"],
             out=tmp_path / "split", **HS, max_memory={"cpu": "700KB"},
             offload_folder=tmp_path / "offload")
    plan = res.metrics["memory_plan"]
    devices = {x["device"]: x for x in plan["devices"]}
    assert set(devices) == {"cpu", "disk"} and plan["fits"]
    assert devices["cpu"]["layers"] and devices["disk"]["layers"]
    assert set(devices["cpu"]["layers"]).isdisjoint(devices["disk"]["layers"])
    assert any((tmp_path / "offload").iterdir())
    assert _same_shards(d["hidden"], tmp_path / "split") == res.metrics["tokens"]


def test_json_device_map_for_generate_and_verify(arch_trained, tmp_path):
    """A hand-written map (the last layers and the head on disk) through generate and the
    functional verify: the same answers and the same acceptance as on one device."""
    d = arch_trained("deepseek_v3")
    dmap = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu",
            **{f"model.layers.{i}": "cpu" for i in range(4)},
            **{f"model.layers.{i}": "disk" for i in range(4, 7)}, "lm_head": "disk"}
    place = {"device_map": dmap, "offload_folder": tmp_path / "offload"}
    gen = {"prompts": d["prompts"], "verifier": d["verifier"], "samples": 3,
           "max_new_tokens": 10, "batch_size": 3, "device": "cpu", "expect_reasoning": "no"}
    ok(generate, tmp_path, out=tmp_path / "one", **gen)
    ok(generate, tmp_path, out=tmp_path / "split", **gen, **place)
    one = [json.loads(x)["messages"] for x in (tmp_path / "one/samples.jsonl").open()]
    split = [json.loads(x)["messages"] for x in (tmp_path / "split/samples.jsonl").open()]
    assert one == split

    common = {"checkpoint": d["drafter"], "verifier": d["verifier"], "data": d["prompts"],
              **VERIFY_SMALL}
    _, single = run_stage(verify, tmp_path, **common)
    _, spread = run_stage(verify, tmp_path, **common, **place)
    for r in (single, spread):
        assert r is not None and r.error is None and {c.name: c for c in r.checks}[
            "lossless"].passed
    for key in ("tau", "acceptance_per_position", "teacher_forced_tau"):
        assert spread.metrics[key] == single.metrics[key], key


@pytest.mark.parametrize("arch", ["qwen3", "deepseek_v3"])
def test_tensor_parallel_hidden_states_under_torchrun(arch_pipeline, arch, tmp_path):
    """Two ranks on gloo with transformers' tp_plan: rank 0 writes shards equal to the
    single-device ones within fp32 rounding of the sharded matmuls' all-reduce."""
    d = arch_pipeline(arch)
    out = tmp_path / "tp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(29500 + os.getpid() % 1000),
           "-m", "pipeline.eagle3.hidden_states", "--tokens", str(d["tokens"]),
           "--verifier", str(d["verifier"]), "--out", str(out), "--shard-tokens", "4000",
           "--batch-tokens", "2048", "--device", "cpu", "--dtype", "float32",
           "--tp-plan", "auto", "--result", str(tmp_path / "r.json")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["metrics"]["memory_plan"]["placement"] == "tensor parallel over 2 ranks"
    assert proc.stdout.count("[hidden_states] wrote shard-00000") == 1  # rank 0 alone
    _, a = list_shards(d["hidden"])
    _, b = list_shards(out)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        ra, rb = ShardReader(x.path), ShardReader(y.path)
        n = int(ra.offsets[-1])
        for key in ("aux", "last"):
            torch.testing.assert_close(rb.rows(key, 0, n), ra.rows(key, 0, n), rtol=1e-4,
                                       atol=1e-5)


def test_tensor_parallel_generate_under_torchrun(arch_pipeline, tmp_path):
    """generate --tp-plan auto on two gloo ranks: rank 0 alone writes, the answers are the
    single process's."""
    d = arch_pipeline("qwen3")
    gen = {"prompts": d["prompts"], "verifier": d["verifier"], "samples": 3,
           "max_new_tokens": 10, "batch_size": 3, "device": "cpu", "expect_reasoning": "no"}
    ok(generate, tmp_path, out=tmp_path / "one", **gen)
    from pipeline.actions import params_to_argv

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(30500 + os.getpid() % 1000),
           "-m", "pipeline.eagle3.generate",
           *params_to_argv({**gen, "out": tmp_path / "tp", "tp_plan": "auto"}),
           "--result", str(tmp_path / "r.json")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    one = (tmp_path / "one" / "samples.jsonl").read_text().splitlines()
    tp = (tmp_path / "tp" / "samples.jsonl").read_text().splitlines()
    assert len(tp) == 3  # not 6: one rank wrote
    assert [json.loads(x)["messages"] for x in tp] == [json.loads(x)["messages"] for x in one]
