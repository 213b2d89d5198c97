"""The streaming client and the fake server together: timings, usage, reasoning, errors."""

from __future__ import annotations

import json

import pytest

from pipeline.vllm.metrics import spec_delta, spec_snapshot
from pipeline.vllm.openai_client import get, stream_request
from tests.sshd import free_port


def test_chat_stream_with_reasoning_and_usage(fake_server) -> None:
    url, record = fake_server("--reasoning-parser", "qwen3",
                              spec={"method": "eagle3", "model": "d",
                                    "num_speculative_tokens": 3})
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 20, "chat_template_kwargs": {"enable_thinking": True}}
    t = stream_request(url, "/v1/chat/completions", body)
    assert t.ok, t.error
    assert t.usage_reported and t.output_tokens == 20
    assert t.reasoning_chars > 0 and t.text_chars > 0
    assert t.chunks < 20  # speculation: several tokens per chunk
    assert t.ttft is not None and t.latency is not None and 0 < t.ttft <= t.latency
    assert t.tpot == pytest.approx((t.latency - t.ttft) / 19)
    assert t.finish_reason == "length"
    sent = json.loads(record.read_text().splitlines()[-1])
    assert sent["body"]["stream"] is True
    assert sent["body"]["stream_options"] == {"include_usage": True}
    off = stream_request(url, "/v1/chat/completions",
                         {**body, "chat_template_kwargs": {"enable_thinking": False}})
    assert off.ok and off.reasoning_chars == 0


def test_completions_stream_and_counters_agree(fake_server) -> None:
    url, _ = fake_server("--fake-acceptance", "1,1,1",
                         spec={"method": "eagle3", "model": "d", "num_speculative_tokens": 3})
    before = spec_snapshot(get(f"{url}/metrics").body.decode())
    t = stream_request(url, "/v1/completions", {"model": "tiny", "prompt": "Once upon",
                                                "max_tokens": 16})
    after = spec_snapshot(get(f"{url}/metrics").body.decode())
    assert t.ok and t.output_tokens == 16
    d = spec_delta(before, after)
    # every draft accepted: 4 tokens a step, 16 tokens = 4 drafts of 3, 12 accepted
    assert (d.drafts, d.draft_tokens, d.accepted) == (4, 12, 12)
    assert d.acceptance_length == 4.0 and d.per_position == [4, 4, 4]


def test_failures_are_results_not_exceptions(fake_server) -> None:
    url, _ = fake_server()
    wrong = stream_request(url, "/v1/chat/completions",
                           {"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert not wrong.ok and wrong.error.startswith("HTTP 404") and "nope" in wrong.error
    refused = stream_request(f"http://127.0.0.1:{free_port()}", "/v1/completions",
                             {"prompt": "x"}, timeout=5)
    assert not refused.ok and refused.error == "connection refused"
    bad = stream_request("ftp://x", "/v1/completions", {"prompt": "x"})
    assert not bad.ok and "not an http(s) URL" in bad.error
    assert get(f"{url}/nowhere").status == 404
    assert get(f"http://127.0.0.1:{free_port()}/health").error == "connection refused"


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "two words"}]}),
    ("/v1/completions", {"prompt": "two words"})])
def test_the_prompts_token_ids_are_kept_once_from_either_endpoint(fake_server, path,
                                                                  body) -> None:
    # vLLM sends them on the first chat chunk, and on the first completions choice
    url, _ = fake_server()
    t = stream_request(url, path, {"model": "tiny", "max_tokens": 6,
                                   "return_token_ids": True, **body})
    assert t.ok, t.error
    assert t.token_ids == [0, 1, 2, 3, 4, 5]
    assert t.prompt_token_ids and all(x >= 1000 for x in t.prompt_token_ids)
    assert "prompt_token_ids" not in t.to_json()  # bench.json keeps the answers only
    plain = stream_request(url, path, {"model": "tiny", "max_tokens": 6, **body})
    assert plain.ok and plain.prompt_token_ids is None and plain.token_ids is None
