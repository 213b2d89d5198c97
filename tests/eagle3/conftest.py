"""Shared tiny artifacts for the EAGLE-3 tests, built once per session.

The stages run in-process through their ``main(argv)`` with argv made by
``params_to_argv``, the way the runner starts them (minus the interpreter start-up).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pipeline.actions import StageResult, params_to_argv, read_result  # noqa: E402


def run_stage(module: ModuleType, tmp: Path, **params: Any) -> tuple[int, StageResult | None]:
    """Run ``module.main`` with ``params`` as flags; return (exit code, result)."""
    result = Path(tmp) / f"result-{module.__name__.rsplit('.', 1)[-1]}-{id(params)}.json"
    if result.exists():
        result.unlink()
    rc = module.main([*params_to_argv(params), "--result", str(result)])
    return rc, (read_result(result) if result.exists() else None)


def ok(module: ModuleType, tmp: Path, **params: Any) -> StageResult:
    rc, result = run_stage(module, tmp, **params)
    assert result is not None, f"{module.__name__} wrote no result"
    assert rc == 0 and result.ok, (rc, result.error, [c for c in result.checks if not c.passed])
    return result


@pytest.fixture
def slow_disk(monkeypatch) -> None:
    """A disk that takes a batch only once the producer (the forward, or vLLM's engine
    side) is already waiting for a free buffer, and then takes 0.5 s: every run stalls on
    the writer, however fast or slow this machine runs the forward."""
    import threading
    import time

    from pipeline.eagle3.states import shard_writer

    waiting = threading.Event()
    real_write = shard_writer.StreamingShard._write_piece
    real_buffer = shard_writer.WritePipeline.buffer
    real_close = shard_writer.WritePipeline.close

    def slow_write(self, t, at):
        waiting.wait()
        time.sleep(0.5)
        real_write(self, t, at)

    def buffer(self):
        if self._free.empty():
            waiting.set()  # the producer waits now: let the disk go
        got = real_buffer(self)
        waiting.clear()
        return got

    def close(self):
        waiting.set()
        shard_writer.StreamingShard._write_piece = real_write
        real_close(self)

    monkeypatch.setattr(shard_writer.StreamingShard, "_write_piece", slow_write)
    monkeypatch.setattr(shard_writer.WritePipeline, "buffer", buffer)
    monkeypatch.setattr(shard_writer.WritePipeline, "close", close)


def synthetic_samples(n: int, seed: int) -> list[dict[str, Any]]:
    """Generate-shaped samples with known-good reasoning (from the task generator itself)."""
    from pipeline.eagle3.text import synthetic

    words = synthetic.stdlib_words(synthetic.stdlib_files(6))
    out = []
    for i, (q, r, a) in enumerate(synthetic.make_tasks(n, seed, words)):
        out.append({"id": f"s{i:04d}", "messages": [
            {"role": "user", "content": q},
            {"role": "assistant", "content": f"<think>{r}</think>{a}"}],
            "finish_reason": "stop", "reasoning": True, "backend": "test"})
    return out


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def tiny_verifier(tmp_path_factory) -> dict[str, Path]:
    from pipeline.eagle3 import build_verifier as verifier

    root = tmp_path_factory.mktemp("verifier")
    rc, result = run_stage(
        verifier, root, out=root / "model", prompts_out=root / "prompts.jsonl", prompts=12,
        seed=0, vocab_size=400, corpus_files=6, hidden_size=64, layers=7, heads=4, kv_heads=2,
        intermediate_size=128, train_samples=400, steps=40, batch_size=16, check_prompts=4,
        min_reasoning_rate=0.0, device="cpu")
    assert rc == 0 and result is not None and result.ok, result
    return {"dir": root / "model", "prompts": root / "prompts.jsonl", "root": root}


@pytest.fixture(scope="session")
def tiny_data(tiny_verifier, tmp_path_factory) -> dict[str, Path]:
    """clean -> tokenize -> hidden_states -> vocab on 240 synthetic samples."""
    from pipeline.eagle3 import clean, hidden_states, tokenize, vocab

    root = tmp_path_factory.mktemp("data")
    v = tiny_verifier["dir"]
    samples = write_jsonl(root / "generated" / "samples.jsonl", synthetic_samples(240, 1))
    ok(clean, root, samples=samples, out=root / "clean", require_think=True)
    ok(tokenize, root, samples=root / "clean", verifier=v, out=root / "tokens")
    hs = ok(hidden_states, root, tokens=root / "tokens", verifier=v, out=root / "hidden",
            shard_tokens=4000, batch_tokens=2048, device="cpu", dtype="float32")
    ok(vocab, root, freqs=root / "tokens", verifier=v, draft_vocab=128,
       out=root / "vocab.safetensors")
    return {"root": root, "verifier": v, "tokens": root / "tokens", "hidden": root / "hidden",
            "vocab": root / "vocab.safetensors", "shards": hs.metrics["shards"]}


TRAIN_PARAMS = {"epochs": 2, "ttt_steps": 3, "lr": 0.003, "batch_size": 16,
                "batch_tokens": 2048, "holdout": 0.1, "device": "cpu", "log_every": 1000}


@pytest.fixture(scope="session")
def tiny_trained(tiny_data, tmp_path_factory) -> dict[str, Any]:
    from pipeline.eagle3 import train

    root = tmp_path_factory.mktemp("train")
    result = ok(train, root, hidden_states=tiny_data["hidden"], verifier=tiny_data["verifier"],
                vocab=tiny_data["vocab"], out=root / "run", **TRAIN_PARAMS)
    return {"dir": root / "run", "result": result, **tiny_data}


ARCH_VERIFIER = {"prompts": 12, "seed": 0, "vocab_size": 400, "corpus_files": 6,
                 "hidden_size": 64, "layers": 7, "heads": 4, "kv_heads": 2,
                 "intermediate_size": 128, "train_samples": 200, "steps": 12,
                 "batch_size": 8, "check_prompts": 0,
                 "device": "cpu"}


@pytest.fixture(scope="session")
def arch_pipeline(tmp_path_factory):
    """``get(arch)``: a tiny verifier of ``arch`` (``deepseek_v3``: MLA with LoRA-ranked q/kv,
    a first dense layer, 4 routed experts + a shared one; ``qwen3``) built from its config by
    the verifier stage, and its data through tokenize -> hidden_states -> vocab, built on
    first use and kept for the session."""
    from pipeline.eagle3 import build_verifier as verifier
    from pipeline.eagle3 import hidden_states, tokenize, vocab

    cache: dict[str, dict[str, Any]] = {}

    def get(arch: str) -> dict[str, Any]:
        if arch in cache:
            return cache[arch]
        root = tmp_path_factory.mktemp(f"arch-{arch}")
        ok(verifier, root, out=root / "verifier", prompts_out=root / "prompts.jsonl",
           arch=arch, **ARCH_VERIFIER)
        v = root / "verifier"
        samples = write_jsonl(root / "generated" / "samples.jsonl", synthetic_samples(96, 1))
        ok(tokenize, root, samples=samples, verifier=v, out=root / "tokens")
        hs = ok(hidden_states, root, tokens=root / "tokens", verifier=v, out=root / "hidden",
                shard_tokens=4000, batch_tokens=2048, device="cpu", dtype="float32")
        ok(vocab, root, freqs=root / "tokens", verifier=v, draft_vocab=128,
           out=root / "vocab.safetensors")
        cache[arch] = {"root": root, "verifier": v, "tokens": root / "tokens",
                       "hidden": root / "hidden", "vocab": root / "vocab.safetensors",
                       "prompts": root / "prompts.jsonl", "samples": samples,
                       "hidden_result": hs}
        return cache[arch]

    return get


# A functional verify small enough for a loaded 2-core machine.
VERIFY_SMALL = {"samples": 2, "max_new_tokens": 12, "k": 3, "device": "cpu", "threads": 2,
                "probe": False, "baselines_free_running": False}


@pytest.fixture(scope="session")
def arch_trained(arch_pipeline, tmp_path_factory):
    """``get(arch)``: :func:`arch_pipeline`'s data plus one epoch of drafter training and
    its export (eagle format, bf16)."""
    from pipeline.eagle3 import export, train

    cache: dict[str, dict[str, Any]] = {}

    def get(arch: str) -> dict[str, Any]:
        if arch not in cache:
            d = arch_pipeline(arch)
            root = tmp_path_factory.mktemp(f"trained-{arch}")
            res = ok(train, root, hidden_states=d["hidden"], verifier=d["verifier"],
                     vocab=d["vocab"], out=root / "train", epochs=1, ttt_steps=3, lr=0.003,
                     batch_size=16, batch_tokens=2048, holdout=0.1, device="cpu",
                     log_every=1000)
            ok(export, root, checkpoint=root / "train", out=root / "drafter", format="eagle",
               dtype="bfloat16")
            cache[arch] = {**d, "train": root / "train", "drafter": root / "drafter",
                           "train_result": res}
        return cache[arch]

    return get
