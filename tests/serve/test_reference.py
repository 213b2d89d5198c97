"""Our served benchmark and vLLM's own client (``vllm bench serve``, vLLM 0.26.0's code) run
back to back by bench/serving/served_reference.py against the stand-in servers: the same requests
go out (prompts, order, lengths, greedy), both count the same tokens and the same served τ,
and one table holds both. How close their timings come is the H200's question (a loaded
2-core machine cannot answer it); what is asserted here is that they measure the same
work, so a gap there is the clients' and not the requests'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.serve import vllm_bench
from tests.serve.helpers import CHAT_PROMPTS
from tests.serve.test_benchmark import COMPLETION_PROMPTS, sent, tiny_tokenizer


def reference(tmp_path: Path, *args: str, pythonpath: str = "") -> subprocess.CompletedProcess:
    # as the docs run it: a module, from the repository root (which puts bench on sys.path)
    return subprocess.run([sys.executable, "-m", "bench.serving.served_reference", *args,
                           "--out", str(tmp_path / "out"), "--vllm-python", sys.executable,
                           "--vllm-pythonpath", pythonpath],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})


@pytest.mark.ml
@pytest.mark.slow
def test_both_clients_send_the_same_requests_and_count_the_same(tmp_path: Path,
                                                                fake_server) -> None:
    site = vllm_bench.pythonpath()
    base, base_record = fake_server()
    spec, spec_record = fake_server("--fake-acceptance", "0.9,0.6,0.3", spec={
        "method": "eagle3", "model": "d", "num_speculative_tokens": 3})
    tok = tiny_tokenizer(tmp_path / "verifier")
    proc = reference(tmp_path, "--baseline-url", base, "--url", spec, "--name", "k3",
                     "--prompts", COMPLETION_PROMPTS, "--tokenizer", str(tok),
                     "--concurrency", "1,2", "--max-tokens", "16", "--min-seconds", "0",
                     "--requests", "5", "--warmup", "0", "--rounds", "2", "--isolate-cpus",
                     pythonpath=site)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    # two servers and the clients: three blocks where three cores are, else said why not
    placed = next(line for line in proc.stdout.splitlines() if line.startswith("CPUs: "))
    if "not isolated" not in placed:
        blocks = [{tuple(r["cpus"]) for r in sent(rec)} for rec in (base_record, spec_record)]
        assert all(len(b) == 1 for b in blocks) and blocks[0] != blocks[1], blocks
    rows = json.loads((tmp_path / "out" / "reference.json").read_text())["rows"]
    assert [(r["concurrency"], r["server"]) for r in rows] == [
        (1, "plain"), (1, "k3"), (2, "plain"), (2, "k3")]
    for r in rows:
        # the same requests, answered with the same tokens, counted alike
        assert r["rounds"] == 2 and len(r["tok_s_rounds"]) == len(r["vllm_tok_s_rounds"]) == 2
        assert r["requests"] == r["vllm_requests"] == 2 * 5
        assert r["tokens"] == r["vllm_tokens"] == 2 * 5 * 16
        assert r["tok_s_diff_ci"][0] <= r["tok_s_diff"] <= r["tok_s_diff_ci"][1]
        assert r["tok_s"] and r["vllm_tok_s"] and r["tpot_p50"] and r["vllm_tpot_p50"]
        assert r["itl_p50"] and r["vllm_itl_p50"] and r["ttft_p99"] and r["vllm_ttft_p99"]
    # the stand-in's acceptance follows each prompt: the same prompts, the same served τ
    for r in rows[1::2]:
        assert r["tau"] == pytest.approx(r["vllm_tau"], abs=1e-9) and r["tau"] > 1
    # what each client sent: per level and round, ours and vLLM's in turn (ours first in
    # the first round, vLLM's first in the second), the same five prompts, greedy, the
    # same length (max_tokens / max_completion_tokens), streamed with usage
    def text(b: dict) -> str:
        content = b["messages"][0]["content"]
        return content if isinstance(content, str) else content[0]["text"]

    def client(b: dict) -> str:
        return "ours" if "max_tokens" in b else "vllm"

    for record in (base_record, spec_record):
        bodies = [r["body"] for r in sent(record)]
        assert len(bodies) == 2 * 2 * 2 * 5
        blocks = [bodies[i: i + 5] for i in range(0, len(bodies), 5)]
        assert [{client(b) for b in block} for block in blocks] == [
            {"ours"}, {"vllm"}, {"vllm"}, {"ours"}] * 2
        for first, second in zip(blocks[::2], blocks[1::2], strict=True):
            assert sorted(map(text, first)) == sorted(map(text, second))
        assert all(b["max_tokens"] == 16 and "ignore_eos" not in b
                   for b in bodies if client(b) == "ours")
        assert all(b["max_completion_tokens"] == 16 and "ignore_eos" not in b
                   for b in bodies if client(b) == "vllm")
        assert all(b["temperature"] == 0 and b["stream"] is True and
                   b["stream_options"] == {"include_usage": True} for b in bodies)
    table = out[out.index("ours against vllm bench serve"):]
    assert "tok/s ours" in table and "TPOT p50 ours" in table and "speedup ours/vLLM" in table
    assert "2 rounds a level" in table
    assert len([ln for ln in table.splitlines() if ln.startswith(("1 |", "2 |"))]) == 4
    assert "Serving Benchmark Result" in (tmp_path / "out" / "vllm-bench.log").read_text()


def test_prompts_vllm_cannot_send_alike_are_refused_in_one_line(tmp_path: Path) -> None:
    proc = reference(tmp_path, "--baseline-url", "http://127.0.0.1:9", "--url",
                     "http://127.0.0.1:9", "--prompts", CHAT_PROMPTS, "--tokenizer", "t")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: prompt chat-01 has 2 messages: vllm bench serve's "
                                  "custom dataset sends one user message"), proc.stderr
