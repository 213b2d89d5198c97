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
