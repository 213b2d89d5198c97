"""The tiny verifier, local generation, and tokenization with the loss mask."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline.eagle3 import build_verifier as verifier
from pipeline.eagle3 import generate, tokenize
from pipeline.eagle3.text.datafiles import read_freqs, read_tokens
from pipeline.eagle3.tokenize import Masker

from ..conftest import ok, run_stage, synthetic_samples, write_jsonl

pytestmark = pytest.mark.ml


def test_verifier_is_a_normal_hf_directory(tiny_verifier):
    model = AutoModelForCausalLM.from_pretrained(str(tiny_verifier["dir"]))
    tok = AutoTokenizer.from_pretrained(str(tiny_verifier["dir"]))
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 7
    assert tok.convert_tokens_to_ids("<think>") != tok.unk_token_id
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": "hello", "reasoning_content": "greet back"}],
        tokenize=False)
    assert text == ("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
                    "<think>greet back</think>hello<|im_end|>\n")
    assert "<think>" in tok.decode(tok("<think>x</think>")["input_ids"], skip_special_tokens=True)


def test_verifier_is_deterministic_for_a_seed(tmp_path):
    params = dict(prompts=0, seed=3, vocab_size=300, corpus_files=3, hidden_size=32, layers=5,
                  heads=2, kv_heads=1, intermediate_size=64, train_samples=64, steps=3,
                  batch_size=8, check_prompts=1, min_reasoning_rate=0.0, device="cpu")
    digests = []
    for name in ("a", "b"):
        ok(verifier, tmp_path, out=tmp_path / name, **params)
        digests.append({f: hashlib.sha256((tmp_path / name / f).read_bytes()).hexdigest()
                        for f in ("model.safetensors", "tokenizer.json")})
    assert digests[0] == digests[1]


TINY = dict(prompts=0, seed=3, vocab_size=300, corpus_files=3, hidden_size=32, layers=5,
            heads=2, kv_heads=1, intermediate_size=64, train_samples=64, steps=2, batch_size=8,
            check_prompts=0, device="cpu")


def test_verifier_gpu_options_run_on_the_cpu(tmp_path, capsys, monkeypatch):
    """The options a 3B verifier trains with, at a tiny size on the CPU: micro-batches
    weigh each piece by its share of the batch's tokens (the same loss as one forward),
    fused AdamW falls back, autocast and checkpointing run, the weights save in bf16, and
    no MFU is claimed without a GPU's peak."""
    whole = ok(verifier, tmp_path, out=tmp_path / "whole", autocast="off", **TINY)
    capsys.readouterr()
    real, used = torch.autocast, []

    def autocast(*a, **k):  # the real context, noting what it was asked for
        used.append((k.get("device_type"), k.get("dtype")))
        return real(*a, **k)
    monkeypatch.setattr(torch, "autocast", autocast)
    pieces = ok(verifier, tmp_path, out=tmp_path / "pieces", micro_batch=3, autocast="bf16",
                grad_checkpointing=True, save_dtype="bfloat16", **TINY)
    log = capsys.readouterr().out
    monkeypatch.setattr(torch, "autocast", real)
    assert used and set(used) == {("cpu", torch.bfloat16)}  # every forward, in bf16
    assert "in pieces of 3" in log and "autocast bf16" in log and "gradient checkpointing" in log
    assert "AdamW fused" not in log and "AdamW" in log
    # bf16 autocast moves the loss a little; a piece weighed wrongly moves it by its share
    assert abs(pieces.metrics["first_loss"] - whole.metrics["first_loss"]) < 0.02
    whole_pieces = ok(verifier, tmp_path, out=tmp_path / "whole-pieces", micro_batch=3,
                      autocast="off", **TINY)
    assert abs(whole_pieces.metrics["first_loss"] - whole.metrics["first_loss"]) < 1e-5
    m = pieces.metrics
    assert m["mfu"] is None and m["gpu"] is None and m["peak_bf16_tflops"] is None
    assert 0 < m["train_tokens"] <= m["train_positions"] and m["train_seconds"] > 0
    assert f"trained on {m['train_tokens']:,} tokens" in pieces.summary
    assert "hidden 32, 5 layers, 2 heads / 1 KV, MLP 64" in pieces.summary
    assert json.loads((tmp_path / "pieces" / "config.json").read_text())["dtype"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "pieces"))
    assert model.dtype == torch.bfloat16
    rc, bad = run_stage(verifier, tmp_path, out=tmp_path / "bad", micro_batch=9, **TINY)
    assert rc == 1 and bad.error == "--micro-batch 9 must be between 1 and --batch-size 8"


def test_fused_adamw_only_on_cuda():
    from argparse import Namespace

    model = torch.nn.Linear(2, 2)
    opt, fused = verifier._optimizer(model, Namespace(fused_adamw=True, lr=1e-3),
                                     torch.device("cpu"))
    assert not fused and not opt.defaults.get("fused")


def test_local_generation_and_resume(tiny_verifier, tmp_path):
    out = tmp_path / "gen"
    params = dict(prompts=tiny_verifier["prompts"], verifier=tiny_verifier["dir"], out=out,
                  max_new_tokens=24, batch_size=4, device="cpu", min_reasoning_capture=0.0)
    first = ok(generate, tmp_path, samples=5, **params)
    assert first.metrics["samples"] == 5
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert all(r["messages"][-1]["role"] == "assistant" and r["backend"] == "local"
               for r in rows)
    assert all(r["finish_reason"] in ("stop", "length") for r in rows)
    second = ok(generate, tmp_path, **params)
    assert second.metrics["new_samples"] == 12 - 5 and second.metrics["samples"] == 12
    ids = [json.loads(x)["id"] for x in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 12
    rc, result = run_stage(generate, tmp_path, **{**params, "max_new_tokens": 30})
    assert rc == 1 and result.error.startswith(f"{out / '.config.json'}: ")


def test_loss_mask_covers_exactly_the_assistant_turn(tiny_data):
    tok = AutoTokenizer.from_pretrained(str(tiny_data["verifier"]))
    tokens = read_tokens(tiny_data["tokens"])
    clean = [json.loads(x) for x in (tiny_data["root"] / "clean" / "samples.jsonl")
             .read_text().splitlines()]
    off = tokens["offsets"]
    for i in (0, 7):
        ids = tokens["input_ids"][off[i]:off[i + 1]].tolist()
        mask = tokens["loss_mask"][off[i]:off[i + 1]].bool().tolist()
        masked = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert masked == clean[i]["messages"][-1]["content"] + "<|im_end|>"
    counts, _ = read_freqs(tiny_data["tokens"])
    assert int(counts.sum()) == int(tokens["loss_mask"].sum())
    assert torch.equal(counts, torch.bincount(tokens["input_ids"][tokens["loss_mask"].bool()]
                                              .long(), minlength=counts.numel()))


def test_text_search_mask_equals_generation_tag_mask(tiny_verifier):
    tok = AutoTokenizer.from_pretrained(str(tiny_verifier["dir"]))
    tagged = Masker(tok)
    assert tagged.use_generation_tags
    plain = Masker(tok)
    plain.use_generation_tags = False  # as for a template without {% generation %}
    for s in synthetic_samples(5, 9):
        msgs = [s["messages"][0], s["messages"][1], {"role": "user", "content": "again"},
                {"role": "assistant", "content": "<think>x</think>y"}]
        assert tagged(msgs) == plain(msgs)


def test_completion_mode(tiny_verifier, tmp_path):
    src = write_jsonl(tmp_path / "s.jsonl", [{"id": "c1", "prompt": "def add(a, b):",
                                              "completion": "\n    return a + b\n"}])
    ok(tokenize, tmp_path, samples=src, verifier=tiny_verifier["dir"], out=tmp_path / "t",
       mode="completion")
    tok = AutoTokenizer.from_pretrained(str(tiny_verifier["dir"]))
    t = read_tokens(tmp_path / "t")
    ids, mask = t["input_ids"].tolist(), t["loss_mask"].bool().tolist()
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == \
        "\n    return a + b\n<|im_end|>"
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if not m]) == "def add(a, b):"
