"""The preflight's GPU arithmetic, run as the action itself with a stand-in nvidia-smi
(its output format checked against a real H200: `0, NVIDIA H200, 143771, 0`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.serve.helpers import STANDIN_VLLM, fake_gpu_bin, make_models


def preflight(tmp_path: Path, gpus: list[str] | None, *args: str,
              env: dict | None = None) -> dict:
    fakebin = fake_gpu_bin(tmp_path / "gpu", gpus)
    result = tmp_path / "result.json"
    subprocess.run([sys.executable, "-m", "pipeline.eagle3.preflight", *args,
                    "--ports", "[]", "--result", str(result)], cwd=ROOT, capture_output=True,
                   timeout=120, env={"PATH": f"{fakebin}:/usr/bin:/bin",
                                     "PYTHONPATH": f"{ROOT}:{STANDIN_VLLM / 'allow_list'}",
                                     **(env or {})})
    return json.loads(result.read_text())


def checks(doc: dict) -> dict:
    return {c["name"]: c for c in doc["checks"]}


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Path]:
    # 256,000 bytes of verifier weights, about 39 KB of drafter: on "GPUs" of 2 MiB with
    # 1.65 MB of headroom they fit at TP 2, not at TP 1
    return make_models(tmp_path / "m", hidden=64, vocab=1000)


def test_weights_that_do_not_fit_suggest_a_tensor_parallel_size(tmp_path, models) -> None:
    target, draft = models
    doc = preflight(tmp_path, ["0, Tiny GPU, 2, 0", "1, Tiny GPU, 2, 0"],
                    "--target", str(target), "--draft", str(draft), "--kv-headroom-gb", "0.00154",
                    "--gpu-memory-utilization", "0.9")
    c = checks(doc)["gpu_memory"]
    assert not c["passed"]
    assert c["message"].endswith("raise tensor_parallel_size to 2")
    assert checks(doc)["gpu_count"]["passed"]
    doc = preflight(tmp_path, ["0, Tiny GPU, 2, 0", "1, Tiny GPU, 2, 0"],
                    "--target", str(target), "--draft", str(draft), "--kv-headroom-gb", "0.00154",
                    "--tensor-parallel-size", "2")
    assert checks(doc)["gpu_memory"]["passed"], checks(doc)["gpu_memory"]


def test_a_busy_gpu_and_visible_devices(tmp_path, models) -> None:
    target, draft = models
    rows = ["0, NVIDIA H200, 143771, 0", "1, NVIDIA H200, 143771, 100000"]
    doc = preflight(tmp_path, rows, "--target", str(target), "--draft", str(draft),
                    env={"CUDA_VISIBLE_DEVICES": "1"})
    assert [g["index"] for g in doc["metrics"]["gpus"]] == [1]
    c = checks(doc)["gpu_memory"]
    assert not c["passed"] and "GPU 1 already has 97.7 GiB in use" in c["message"]
    doc = preflight(tmp_path, rows, "--target", str(target), "--draft", str(draft),
                    env={"CUDA_VISIBLE_DEVICES": "0"})
    assert checks(doc)["gpu_memory"]["passed"]
    assert doc["metrics"]["gpus"] == [{"index": 0, "name": "NVIDIA H200", "total_gib": 140.4,
                                       "used_gib": 0.0}]


def test_no_gpu_and_a_missing_model(tmp_path, models) -> None:
    _target, draft = models
    doc = preflight(tmp_path, None, "--target", str(tmp_path / "nowhere"), "--draft",
                    str(draft))
    c = checks(doc)
    assert not c["gpu_count"]["passed"] and "nvidia-smi not on PATH" in c["gpu_count"]["message"]
    assert not c["model_files"]["passed"]
    assert "is neither a directory nor in the Hugging Face cache" in c["model_files"]["message"]


def test_a_model_id_is_found_in_the_hub_cache(tmp_path, models) -> None:
    target, draft = models
    snap = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snap.parent.mkdir(parents=True)
    os.symlink(target, snap)
    doc = preflight(tmp_path, ["0, NVIDIA H200, 143771, 0"], "--target", "org/tiny",
                    "--draft", str(draft), env={"HF_HOME": str(tmp_path / "hf")})
    assert checks(doc)["model_files"]["passed"]
    assert doc["metrics"]["target_model_type"] == "llama"
    assert doc["metrics"]["target_bytes"] == (target / "model.safetensors").stat().st_size
