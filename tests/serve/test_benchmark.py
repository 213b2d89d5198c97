"""The benchmark action run directly against fake servers: endpoints, chat templates,
engines, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.vllm.metrics import spec_delta, spec_snapshot
from pipeline.vllm.openai_client import get
from tests.conftest import ROOT
from tests.serve.helpers import CHAT_PROMPTS

SPEC = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3}
COMPLETION_PROMPTS = str(ROOT / "examples" / "prompts" / "completion.jsonl")


def benchmark(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    """The action run as the runner runs it; one trial of exactly `requests` per level
    unless the test says otherwise (the trials have tests of their own)."""
    result = tmp_path / "result.json"
    args = (*args, *(() if "--trials" in args else ("--trials", "1")),
            *(() if "--min-seconds" in args else ("--min-seconds", "0")))
    proc = subprocess.run([sys.executable, "-m", "pipeline.eagle3.benchmark", *args,
                           "--result", str(result)], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=240)
    doc = json.loads(result.read_text()) if result.exists() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


def sent(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def tiny_tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    fast.chat_template = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>"
        "{% if enable_thinking is defined and not enable_thinking %}<think></think>"
        "{% else %}<think>{% endif %}{% endif %}")
    fast.save_pretrained(str(path))
    return path


@pytest.mark.ml
@pytest.mark.parametrize("reasoning, ending", [("--reasoning", "<|assistant|><think>"),
                                                ("--no-reasoning",
                                                 "<|assistant|><think></think>")])
def test_completions_endpoint_applies_the_verifiers_chat_template(
        tmp_path: Path, fake_server, reasoning: str, ending: str) -> None:
    url, record = fake_server(spec=SPEC)
    tok = tiny_tokenizer(tmp_path / "verifier")
    code, doc, out = benchmark(tmp_path, "--url", url, "--prompts", CHAT_PROMPTS,
                               "--endpoint", "completions", "--tokenizer", str(tok),
                               reasoning, "--concurrency", "[2]", "--max-tokens", "8",
                               "--warmup", "0", "--requests", "4")
    assert code == 0, out
    bodies = [r["body"] for r in sent(record)]
    assert all(r["path"] == "/v1/completions" for r in sent(record))
    first = json.loads(Path(CHAT_PROMPTS).read_text().splitlines()[0])["messages"]
    expected = "".join(f"<|{m['role']}|>{m['content']}\n" for m in first) + ending
    assert any(b["prompt"] == expected for b in bodies)
    assert all(b["prompt"].endswith(ending) for b in bodies)
    assert doc["metrics"]["requests_completed"] == 4
    assert "baseline_not_speculating" not in {c["name"] for c in doc["checks"]}


def test_chat_endpoint_sends_the_reasoning_switch_and_plain_prompts(tmp_path: Path,
                                                                    fake_server) -> None:
    url, record = fake_server("--reasoning-parser", "qwen3", spec=SPEC)
    code, doc, out = benchmark(tmp_path, "--url", url, "--prompts", COMPLETION_PROMPTS,
                               "--no-reasoning", "--concurrency", "[1]", "--max-tokens", "8",
                               "--warmup", "1", "--requests", "3", "--ignore-eos")
    assert code == 0, out
    bodies = [r["body"] for r in sent(record)]
    assert len(bodies) == 1 + 3  # the warm-up is sent but not measured
    assert bodies[1]["messages"] == [{"role": "user", "content": json.loads(
        Path(COMPLETION_PROMPTS).read_text().splitlines()[0])["prompt"]}]
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in bodies)
    assert all(b["ignore_eos"] is True and b["temperature"] == 0.0 for b in bodies)
    assert doc["metrics"]["levels"][0]["completed"] == 3
    details = json.loads(Path(doc["artifacts"][0]).read_text())
    assert [r["index"] for r in details["levels"][0]["records"]] == [0, 1, 2]
    assert all(r["output_tokens"] == 8 and r["usage_reported"]
               for r in details["levels"][0]["records"])


def test_several_engines_add_up_to_the_servers_totals(tmp_path: Path, fake_server) -> None:
    url, _ = fake_server("--fake-engines", "2", spec=SPEC)
    code, doc, out = benchmark(tmp_path, "--url", url, "--prompts", CHAT_PROMPTS,
                               "--concurrency", "[4]", "--max-tokens", "16", "--warmup", "0")
    assert code == 0, out
    snap = spec_snapshot(get(f"{url}/metrics").body.decode())
    assert snap.engines == ("0", "1")
    total = spec_delta(spec_snapshot(""), snap)
    m = doc["metrics"]
    assert m["num_drafts"] == total.drafts and m["num_accepted_tokens"] == total.accepted
    assert m["acceptance_per_position"] == [round(x, 4) for x in
                                            total.acceptance_per_position]


@pytest.mark.parametrize("args, message", [
    (["--url", "http://127.0.0.1:9", "--prompts", CHAT_PROMPTS],
     "no speculative server answers at http://127.0.0.1:9: connection refused"),
    (["--prompts", CHAT_PROMPTS, "--endpoint", "completions"],
     "chat prompts on the completions endpoint need `tokenizer`"),
    (["--prompts", "BAD"], ":2: not JSON"),
    (["--prompts", CHAT_PROMPTS, "--concurrency", "[0]"],
     "concurrency must be a list of positive integers"),
])
def test_bad_input_fails_with_a_clear_error(tmp_path: Path, fake_server, args: list[str],
                                            message: str) -> None:
    url, _ = fake_server(spec=SPEC)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": oops}\n')
    args = [str(bad) if a == "BAD" else a for a in args]
    if "--url" not in args:
        args = ["--url", url, *args]
    code, doc, out = benchmark(tmp_path, *args)
    assert code != 0
    assert message in (doc.get("error") or out), out


def test_a_secondary_served_name_keeps_the_spec_counters(tmp_path: Path, fake_server) -> None:
    """`--served-model-name primary alias`, benchmarked as `alias`: vLLM labels the
    counters with the first name only, and they must still be found."""
    url, record = fake_server("--served-model-name", "primary", "alias", spec=SPEC)
    models = get(f"{url}/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["primary", "alias"]
    assert 'model_name="primary"' in get(f"{url}/metrics").body.decode()
    code, doc, out = benchmark(tmp_path, "--url", url, "--model", "alias", "--prompts",
                               CHAT_PROMPTS, "--concurrency", "[1]", "--max-tokens", "16",
                               "--warmup", "0", "--requests", "3")
    assert code == 0, out
    assert all(r["body"]["model"] == "alias" for r in sent(record))
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["spec_decode_metrics"]["passed"], checks["spec_decode_metrics"]
    assert doc["metrics"]["num_drafts"] > 0 and doc["metrics"]["acceptance_length"] > 1


def test_each_level_has_its_served_figures_its_table_and_its_outputs_compared(
        tmp_path: Path, fake_server) -> None:
    base_url, base_record = fake_server()
    spec_url, _ = fake_server("--fake-acceptance", "0.9,0.6,0.3", spec=SPEC)
    verifier = tmp_path / "verifier"
    verifier.mkdir()
    import numpy as np
    from safetensors.numpy import save_file
    save_file({"a": np.zeros((1000, 256), np.float16), "b": np.zeros(24, np.float32)},
              str(verifier / "model.safetensors"))
    code, doc, out = benchmark(tmp_path, "--url", spec_url, "--baseline-url", base_url,
                               "--prompts", CHAT_PROMPTS, "--concurrency", "[1, 2]",
                               "--max-tokens", "24", "--warmup", "0", "--requests", "17",
                               "--verifier", str(verifier), "--gpu-name", "NVIDIA H200")
    assert code == 0, out
    m = doc["metrics"]
    # the roofline of plain decoding at c=1: weight bytes (from the headers) over TPOT
    roof = m["roofline"]
    # float16 as stored, float32 as vLLM serves it (bfloat16)
    assert roof["weight_bytes"] == 1000 * 256 * 2 + 24 * 2
    assert roof["tpot_ms"] == m["baseline_tpot_p50_ms_c1"]
    assert roof["bandwidth_gb_s"] == pytest.approx(
        roof["weight_bytes"] / (roof["tpot_ms"] / 1000) / 1e9, rel=1e-3)
    assert roof["gpu_model"] == "H200 SXM" and roof["peak_gb_s"] == 4800.0
    assert roof["share_of_peak"] == pytest.approx(roof["bandwidth_gb_s"] / 4800, rel=1e-2)
    assert "roofline (plain decoding, c=1): 0.5 MB of weights" in out
    assert "bound by fixed per-step costs, not by memory" in out
    assert all(0 <= lv["host_busy"] <= 1 for lv in m["levels"])
    # τ per level from that level's own counter deltas; together they are the total
    per_level = [lv["spec_decode"] for lv in m["levels"] if lv["role"] == "spec"]
    assert [lv["num_drafts"] for lv in per_level] == [m["num_drafts_c1"], m["num_drafts_c2"]]
    assert m["num_drafts_c1"] + m["num_drafts_c2"] == m["num_drafts"]
    for c, lv in zip((1, 2), per_level, strict=True):
        assert m[f"acceptance_length_c{c}"] == pytest.approx(
            1 + lv["num_accepted_tokens"] / lv["num_drafts"], abs=1e-4)
        assert len(m[f"acceptance_per_position_c{c}"]) == 3
    # the same greedy answers, compared token id by token id (asked for on every request)
    assert all(r["body"]["return_token_ids"] is True for r in sent(base_record))
    assert m["outputs_equal_c1"] == m["outputs_equal_c2"] == m["outputs_equal"] == 1.0
    assert m["outputs_compared"] == 2 * 17
    assert [o["by_tokens"] for o in m["outputs"]] == [17, 17]
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["outputs_equal_plain"]["passed"]
    assert checks["outputs_equal_plain"]["message"] == (
        "c=1: 17/17 answers equal plain greedy (token ids); c=2: 17/17")
    # one table, a line per concurrency, the same numbers as the metrics
    rows = {r["concurrency"]: r for r in m["served_table"]}
    assert rows[2]["speedup"] == pytest.approx(m["speedup_c2"], abs=1e-3)
    assert rows[1]["tau"] == m["acceptance_length_c1"]
    assert rows[1]["plain"]["tpot_p50_ms"][0] == m["baseline_tpot_p50_ms_c1"]
    assert rows[1]["plain_tok_s"][0] == m["baseline_throughput_c1"]
    table = out[out.index("served (vLLM"):].splitlines()
    assert table[1].split("|")[0].strip() == "c" and "served τ" in table[1]
    assert [line.split("|")[0].strip() for line in table[3:5]] == ["1", "2"]
    assert table[3].rstrip().endswith("17/17")
    assert f"{m['speedup_c1']:.2f}x" in table[3]


def test_a_lossy_engine_fails_the_outputs_check_and_says_where(tmp_path: Path,
                                                               fake_server) -> None:
    base_url, _ = fake_server()
    spec_url, _ = fake_server("--fake-diverge-after", "5", spec=SPEC)
    code, doc, _out = benchmark(tmp_path, "--url", spec_url, "--baseline-url", base_url,
                               "--prompts", CHAT_PROMPTS, "--concurrency", "[1]",
                               "--max-tokens", "12", "--warmup", "0", "--requests", "3")
    m = doc["metrics"]
    assert m["outputs_equal_c1"] == 0.0 and m["outputs_equal"] == 0.0
    check = next(c for c in doc["checks"] if c["name"] == "outputs_equal_plain")
    assert not check["passed"] and check["value"] == "0/3"
    assert "first difference: request 0 (prompt chat-01) at token 5, spec [6, 7" in \
        check["message"], check["message"]
    assert "against plain [5, 6" in check["message"]
    # asked, plain's own logits put spec's token 6 nats below its own: no rounding
    assert "3 of 3 place(s) are no near-tie: prompt chat-01 at token 5, spec's token 6 is " \
        "6.000 nats below plain's token (5; <= 0.5 nats would be rounding)" in \
        check["message"], check["message"]
    assert [t["margin"] for t in m["outputs_ties"]] == [6.0, 6.0, 6.0]
    assert code != 0


@pytest.mark.parametrize("margin, passed", [("0.5", True), ("0", False)])
def test_answers_that_part_at_a_near_tie_pass_and_say_so(tmp_path: Path, fake_server,
                                                         margin: str, passed: bool) -> None:
    # the plain server rates the token the spec server gives only 0.05 nats below its own,
    # as bfloat16 rounding in a k+1-token verify pass can turn it (a 3.1B verifier at k=5)
    base_url, base_record = fake_server("--fake-tie-margin", "0.05")
    spec_url, _ = fake_server("--fake-diverge-after", "5", spec=SPEC)
    code, doc, out = benchmark(tmp_path, "--url", spec_url, "--baseline-url", base_url,
                               "--prompts", CHAT_PROMPTS, "--concurrency", "[1]",
                               "--max-tokens", "12", "--warmup", "0", "--requests", "3",
                               "--tie-margin", margin)
    check = next(c for c in doc["checks"] if c["name"] == "outputs_equal_plain")
    assert check["passed"] is passed and check["value"] == "0/3", out
    if not passed:
        assert "outputs_ties" not in doc["metrics"]
        assert code != 0
        return
    assert code == 0, out
    assert "the 3 that differ part at 3 place(s), each a near-tie of plain's own logits " \
        "(margin 0.050 nats at most, <= 0.5 allowed)" in check["message"], check["message"]
    ties = doc["metrics"]["outputs_ties"]
    assert [(t["prompt"], t["at"], t["spec_token"], t["plain_token"], t["margin"])
            for t in ties] == [(p, 5, 6, 5, 0.05) for p in ("chat-01", "chat-02", "chat-03")]
    # each asked once, on the plain server, with the prompt's ids and the 5 shared tokens
    asked = [r["body"] for r in sent(base_record) if isinstance(r["body"].get("prompt"),
                                                                  list)]
    assert len(asked) == 3
    assert all(b["prompt"][-5:] == [0, 1, 2, 3, 4] and min(b["prompt"][:-5]) >= 1000
               and b["max_tokens"] == 1 and b["return_tokens_as_token_ids"] for b in asked)


def test_held_out_prompts_are_picked_as_verify_picks_them(tmp_path: Path,
                                                          fake_server) -> None:
    url, record = fake_server(spec=SPEC)
    prompts = tmp_path / "prompts.jsonl"
    rows = [("a", "one"), ("b", "two"), ("c", "three"), ("d", "two"), ("e", "four"),
            ("f", "five"), ("g", "six")]
    prompts.write_text("".join(json.dumps({"id": i, "messages": [
        {"role": "user", "content": t}]}) + "\n" for i, t in rows))
    samples = tmp_path / "samples.jsonl"   # generate's output: trained on a and "four"
    samples.write_text(json.dumps({"id": "a", "messages": [
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "x"}]}) + "\n"
        + json.dumps({"id": "zz", "messages": [{"role": "user", "content": " four "}]})
        + "\n")
    code, doc, out = benchmark(tmp_path, "--url", url, "--prompts", str(prompts),
                               "--exclude", str(samples), "--samples", "3",
                               "--concurrency", "[1]", "--max-tokens", "4", "--warmup", "0",
                               "--requests", "3")
    assert code == 0, out
    sent_texts = [r["body"]["messages"][0]["content"] for r in sent(record)]
    assert sent_texts == ["two", "three", "five"]  # b, c, f: not a, d (repeat), e (trained)
    assert f"3 prompts from {prompts} (held out from {samples})" in out

    code, doc, out = benchmark(tmp_path, "--url", url, "--prompts", str(samples),
                               "--exclude", str(samples))
    assert code != 0 and "no held-out prompt left" in (doc.get("error") or out)
