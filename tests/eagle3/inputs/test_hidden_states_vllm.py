"""hidden_states --backend vllm: the id conversion, and the same shards as --backend hf.

The backend's logic (grouping, id conversion, the final norm, the shard writer, the disk
report) is driven here by a stand-in engine with the interface the backend drives
(``states(prompts)``, ``close()``) whose states come from the Hugging Face model in vLLM's
convention. The real engine runs on the GPU host (bench/eagle3/hidden_states_backends.py); the
test that needs it skips, by name, where vLLM is absent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from pipeline.eagle3 import hidden_states
from pipeline.eagle3.states import vllm_backend
from pipeline.eagle3.states.shards import ShardReader, list_shards
from pipeline.eagle3.states.vllm_backend import FinalNorm, engine_layer_ids, hf_states
from pipeline.eagle3.training.train_data import TrainData

from ..conftest import ok, run_stage

pytestmark = pytest.mark.ml


class HFStandIn:
    """vLLM's extraction, played by the Hugging Face model: for id ``k < N`` the input of
    decoder layer ``k``; for id ``N`` the residual stream before the final norm (what
    vLLM's models append at ``end_layer``), *not* HF's ``output_hidden_states[N]``."""

    def __init__(self, verifier: Path, ids: list[int], **kwargs):
        self.model = AutoModelForCausalLM.from_pretrained(str(verifier)).eval()
        self.ids, self.kwargs, self.calls, self.closed = ids, kwargs, [], False

    def states(self, prompts):
        self.calls.append(len(prompts))
        body = self.model.model
        n = len(body.layers)
        out = []
        for p in prompts:  # vLLM packs prompts without padding: the same as one at a time
            grabbed = {}
            h = body.norm.register_forward_pre_hook(
                lambda _m, args, g=grabbed: g.__setitem__("pre", args[0]))
            with torch.no_grad():
                hs = body(input_ids=torch.tensor([p]), output_hidden_states=True).hidden_states
            h.remove()
            out.append(torch.stack([hs[k][0] if k < n else grabbed["pre"][0]
                                    for k in self.ids], dim=1))
        return out

    def close(self):
        self.closed = True


@pytest.fixture
def stand_in(monkeypatch):
    made = []

    def open_engine(verifier, ids, **kwargs):
        made.append(HFStandIn(verifier, ids, **kwargs))
        return made[-1]

    monkeypatch.setattr(vllm_backend, "open_engine", open_engine)
    return made


COMMON = dict(shard_tokens=4000, batch_tokens=2048, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def vllm_hidden(tiny_data, tmp_path_factory):
    """tiny_data's tokens through --backend vllm with the stand-in engine."""
    mp = pytest.MonkeyPatch()
    made = []
    mp.setattr(vllm_backend, "open_engine",
               lambda v, ids, **kw: made.append(HFStandIn(v, ids, **kw)) or made[-1])
    root = tmp_path_factory.mktemp("vllm-backend")
    try:
        res = ok(hidden_states, root, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
                 out=root / "hidden", backend="vllm", **COMMON)
    finally:
        mp.undo()
    return {"dir": root / "hidden", "result": res, "engine": made[0]}


def test_engine_ids_are_the_aux_ids_and_the_pre_norm_state():
    assert engine_layer_ids([2, 16, 29], 32) == [2, 16, 29, 32]
    for bad in ([16, 2, 29], [2, 2, 29], [2, 16, 32]):
        with pytest.raises(ValueError):
            engine_layer_ids(bad, 32)


def test_conversion_gives_output_hidden_states(tiny_verifier):
    """vLLM's ids k < N are HF's output_hidden_states[k]; HF's [N] is the final norm of
    vLLM's N. Without the norm, or one id off (SGLang's count), nothing matches."""
    v = tiny_verifier["dir"]
    vcfg = json.loads((v / "config.json").read_text())
    n, hidden = vcfg["num_hidden_layers"], vcfg["hidden_size"]
    ids = engine_layer_ids([1, 3, 5], n)
    engine = HFStandIn(v, ids)
    prompt = list(range(5, 41))
    (states,) = engine.states([prompt])
    assert states.shape == (len(prompt), 4, hidden)
    aux, last = hf_states(states, ids, n, FinalNorm.of(v, vcfg))
    with torch.no_grad():
        full = engine.model(torch.tensor([prompt]), output_hidden_states=True)
    for j, k in enumerate([1, 3, 5]):
        torch.testing.assert_close(aux[:, j * hidden:(j + 1) * hidden], full.hidden_states[k][0])
        assert not torch.allclose(aux[:, j * hidden:(j + 1) * hidden],
                                  full.hidden_states[k + 1][0], atol=1e-3)
    torch.testing.assert_close(last, full.hidden_states[n][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(engine.model.lm_head(last), full.logits[0], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(states[:, -1], full.hidden_states[n][0], atol=1e-2)
    with pytest.raises(ValueError):
        hf_states(states[:, :3], ids, n, FinalNorm.of(v, vcfg))


def _backend_dirs(tiny_data, vllm_hidden):
    return {"hf": tiny_data["hidden"], "vllm": vllm_hidden["dir"]}


@pytest.mark.parametrize("which", ["hf", "vllm"])
def test_layout_and_ids(tiny_data, vllm_hidden, which):
    """The same checks on both backends' shards: the index, every tensor's name, dtype and
    shape, the sample order, and each aux id against output_hidden_states."""
    d = _backend_dirs(tiny_data, vllm_hidden)[which]
    index, shards = list_shards(d)
    assert index["backend"] == which and index["aux_layers"] == [2, 3, 4]
    assert index["format"] == "eagle3-hidden/1" and len(shards) == tiny_data["shards"]
    model = AutoModelForCausalLM.from_pretrained(str(tiny_data["verifier"])).eval()
    hidden = model.config.hidden_size
    from safetensors import safe_open

    for info in shards:
        with safe_open(str(info.path), framework="pt") as fh:
            assert sorted(fh.keys()) == ["aux", "input_ids", "last", "loss_mask", "offsets",
                                         "sample_index"]
            t = fh.get_slice("input_ids").get_shape()[0]
            assert fh.get_slice("aux").get_shape() == [t, 3 * hidden]
            assert fh.get_slice("last").get_shape() == [t, hidden]
            assert str(fh.get_slice("input_ids").get_dtype()) == "I32"
            assert set(fh.metadata()) == {"format", "config_hash", "aux_layers", "hidden_size",
                                          "sample_start", "num_samples"}
        reader = ShardReader(info.path)
        lengths = (reader.offsets[1:] - reader.offsets[:-1]).tolist()
        assert lengths == sorted(lengths, reverse=True)
    reader = ShardReader(shards[-1].path)
    for j in (0, reader.num_samples - 1):
        sample = reader.sample(j)
        with torch.no_grad():
            full = model(sample["input_ids"].long()[None], output_hidden_states=True)
        for n, k in enumerate(index["aux_layers"]):
            torch.testing.assert_close(sample["aux"][:, n * hidden:(n + 1) * hidden],
                                       full.hidden_states[k][0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sample["last"], full.hidden_states[-1][0], rtol=1e-5,
                                   atol=1e-5)
    TrainData(d, seed=0, holdout=0.1, max_length=512)  # train reads it


def test_vllm_backend_writes_what_hf_writes(tiny_data, vllm_hidden):
    """Byte for byte the same headers, order, ids and masks; states equal to rounding."""
    hf_index = json.loads((tiny_data["hidden"] / "index.json").read_text())
    v_index = json.loads((vllm_hidden["dir"] / "index.json").read_text())
    assert {k: v for k, v in hf_index.items() if k != "backend"} == \
        {k: v for k, v in v_index.items() if k != "backend"}
    for a, b in zip(sorted(tiny_data["hidden"].glob("shard-*")),
                    sorted(vllm_hidden["dir"].glob("shard-*")), strict=True):
        ra, rb = ShardReader(a), ShardReader(b)
        assert ra.meta == rb.meta
        for key in ("offsets", "sample_index", "input_ids", "loss_mask"):
            assert torch.equal(getattr(ra, key), getattr(rb, key)), key
        rows = int(ra.offsets[-1])
        for key in ("aux", "last"):
            torch.testing.assert_close(ra.rows(key, 0, rows), rb.rows(key, 0, rows),
                                       rtol=1e-5, atol=1e-5)
    m = vllm_hidden["result"].metrics
    assert m["backend"] == "vllm" and m["engine_layer_ids"] == [2, 3, 4, 7]
    assert m["tokens_per_s"] > 0 and m["written_gb"] > 0 and m["disk_bound"] in (True, False)
    engine = vllm_hidden["engine"]
    assert engine.closed and engine.kwargs["tensor_parallel_size"] == 1
    assert engine.kwargs["max_model_len"] > 0 and len(engine.calls) >= tiny_data["shards"]


def test_resume_across_backends(tiny_data, stand_in, tmp_path):
    """A shard made by hf is kept by a vllm run (same states, same config hash)."""
    out = tmp_path / "hidden"
    shutil.copytree(tiny_data["hidden"], out)
    (out / "shard-00001.safetensors").unlink()
    res = ok(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
             out=out, backend="vllm", **COMMON)
    assert res.metrics["resumed_shards"] == tiny_data["shards"] - 1
    again = ShardReader(out / "shard-00001.safetensors").sample(0)["aux"]
    original = ShardReader(tiny_data["hidden"] / "shard-00001.safetensors").sample(0)["aux"]
    torch.testing.assert_close(again, original, rtol=1e-5, atol=1e-5)


def test_deepseek_verifier_through_the_vllm_backend(arch_pipeline, stand_in, tmp_path):
    """MLA + routed experts: the same conversion holds (the final norm is an RMSNorm)."""
    d = arch_pipeline("deepseek_v3")
    ok(hidden_states, tmp_path, tokens=d["tokens"], verifier=d["verifier"],
       out=tmp_path / "h", backend="vllm", **COMMON)
    for a, b in zip(sorted(d["hidden"].glob("shard-*")), sorted((tmp_path / "h").glob("shard-*")),
                    strict=True):
        ra, rb = ShardReader(a), ShardReader(b)
        rows = int(ra.offsets[-1])
        assert torch.equal(ra.sample_index, rb.sample_index)
        for key in ("aux", "last"):
            torch.testing.assert_close(ra.rows(key, 0, rows), rb.rows(key, 0, rows),
                                       rtol=1e-4, atol=1e-4)


def test_a_slow_disk_is_reported_by_the_vllm_backend(tiny_data, stand_in, tmp_path,
                                                      slow_disk, capsys):
    """``slow_disk`` under the vLLM backend: the engine side's wait is measured too."""
    res = ok(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
             out=tmp_path / "h", limit=60, batch_tokens=512, write_buffers=2, device="cpu",
             dtype="float32", backend="vllm")
    m = res.metrics
    assert m["write_stall_seconds"] >= 0.5 * 5 and m["disk_bound"] is True
    assert "the disk is the bottleneck" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    ({"backend": "vllm", "device_map": "auto"}, "--device-map place the verifier for "
                                                "--backend hf; vLLM places it itself"),
    ({"backend": "vllm", "tensor_parallel_size": 0}, "--tensor-parallel-size must be at least 1"),
    ({"backend": "vllm", "engine_args": [1]}, "--engine-args must be a JSON object"),
    ({"tensor_parallel_size": 2}, "--tensor-parallel-size is for --backend vllm"),
])
def test_bad_backend_flags(tiny_data, stand_in, tmp_path, extra, message):
    out = tmp_path / "h"
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], out=out, **{**COMMON, **extra})
    assert rc == 1 and result.error.startswith(message), result.error
    assert not out.exists() and not stand_in


def test_final_norm_refusals(tiny_data, tmp_path):
    v = tmp_path / "verifier"
    shutil.copytree(tiny_data["verifier"], v)
    cfg = json.loads((v / "config.json").read_text())
    (v / "config.json").write_text(json.dumps({**cfg, "model_type": "gemma3_text"}))
    with pytest.raises(Exception, match="not a plain RMSNorm") as err:
        FinalNorm.of(v, json.loads((v / "config.json").read_text()))
    assert str(err.value).startswith(f"{v / 'config.json'}: --backend vllm does not support")
    (v / "config.json").write_text(json.dumps({k: x for k, x in cfg.items()
                                               if k != "rms_norm_eps"}))
    with pytest.raises(Exception, match="no rms_norm_eps"):
        FinalNorm.of(v, json.loads((v / "config.json").read_text()))


def test_without_vllm_the_backend_says_so(tiny_data, tmp_path):
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here: the missing-vLLM message cannot be seen")
    rc, result = run_stage(hidden_states, tmp_path, tokens=tiny_data["tokens"],
                           verifier=tiny_data["verifier"], out=tmp_path / "h", backend="vllm",
                           **COMMON)
    assert rc == 1 and result.error.startswith("--backend vllm needs vLLM"), result.error


def test_real_vllm_matches_hf(tiny_data, tmp_path):
    """The real engine against the hf backend; needs vLLM and a GPU."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        pytest.skip("vLLM is not installed here: bench/eagle3/hidden_states_backends.py runs this "
                    "comparison on the GPU host")
    if not torch.cuda.is_available():
        pytest.skip("vLLM is installed but no GPU: the real engine needs CUDA")
    ok(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
       out=tmp_path / "v", backend="vllm", shard_tokens=4000, batch_tokens=2048,
       dtype="bfloat16", gpu_memory_utilization=0.3)
    ok(hidden_states, tmp_path, tokens=tiny_data["tokens"], verifier=tiny_data["verifier"],
       out=tmp_path / "h", shard_tokens=4000, batch_tokens=2048, dtype="bfloat16")
    for a, b in zip(sorted((tmp_path / "h").glob("shard-*")),
                    sorted((tmp_path / "v").glob("shard-*")), strict=True):
        ra, rb = ShardReader(a), ShardReader(b)
        rows = int(ra.offsets[-1])
        for key in ("aux", "last"):
            x, y = ra.rows(key, 0, rows).float(), rb.rows(key, 0, rows).float()
            assert (x - y).norm() / y.norm() < 2e-2, key


@pytest.mark.parametrize("fmt", ["fp8", "int4"])
def test_the_quantized_checkpoint_as_shipped(tiny_data, tmp_path, fmt):
    """What the backend reads itself from a shipped FP8/INT4 checkpoint (the final norm,
    the stored bytes) comes from the checkpoint as it is: the norm stays unquantized."""
    from pipeline.eagle3.hardware.quantize_checkpoint import quantize_dir

    q, twin = tmp_path / fmt, tmp_path / "twin"
    quantize_dir(tiny_data["verifier"], q, fmt, twin=twin, int4_targets="all")  # a dense verifier
    qcfg = json.loads((q / "config.json").read_text())
    assert qcfg["quantization_config"]
    norm, ref = FinalNorm.of(q, qcfg), FinalNorm.of(twin, json.loads(
        (twin / "config.json").read_text()))
    assert torch.equal(norm.weight, ref.weight) and norm.eps == ref.eps
    assert vllm_backend.stored_bytes(q) == (q / "model.safetensors").stat().st_size
    assert vllm_backend.stored_bytes(q) < vllm_backend.stored_bytes(twin)


def test_engine_groups_keep_the_order_and_the_bounds():
    from pipeline.eagle3.states.vllm_backend import engine_groups

    lengths = {i: n for i, n in enumerate([50, 40, 30, 30, 20, 10])}
    groups = engine_groups(list(lengths), lengths, batch_tokens=80, max_prompts=3)
    assert groups == [[0], [1, 2], [3, 4, 5]]
    assert all(sum(lengths[i] for i in g) <= 80 and len(g) <= 3 for g in groups)
    assert engine_groups([0, 1], {0: 100, 1: 5}, batch_tokens=80, max_prompts=8) == [[0], [1]]


def test_an_engine_error_keeps_its_reason_on_one_line() -> None:
    """pydantic (vLLM's config errors) puts the reason after a line that only counts."""
    from pipeline.errors import exc_line

    assert exc_line(ValueError("1 validation error for ModelConfig\n  max_model_len\n"
                               "    exceeds max_position_embeddings")) == (
        "1 validation error for ModelConfig; max_model_len; exceeds max_position_embeddings")
    assert exc_line(RuntimeError("")) == "RuntimeError"
    assert len(exc_line(OSError("x" * 1000))) == 300
