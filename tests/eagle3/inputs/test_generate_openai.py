"""The OpenAI-compatible backend end to end, against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pipeline.eagle3 import generate

from ..conftest import run_stage, write_jsonl

pytestmark = pytest.mark.ml


class FakeServer:
    """Answers /v1/chat/completions like vLLM with a reasoning parser.

    Each prompt's first request gets a 500 (so every sample needs one retry); prompts
    containing "forbidden" get a 400, which must not be retried.
    """

    def __init__(self, reasoning: bool = True, fail_first: bool = True):
        self.reasoning, self.fail_first = reasoning, fail_first
        self.requests: Counter[str] = Counter()
        self.auth: set[str] = set()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                question = body["messages"][-1]["content"]
                with server.lock:
                    server.requests[question] += 1
                    n = server.requests[question]
                    server.auth.add(self.headers.get("Authorization", ""))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": "not found"})
                if "forbidden" in question:
                    return self._send(400, {"error": {"message": "bad request"}})
                if n == 1 and server.fail_first:
                    return self._send(500, {"error": {"message": "warming up"}})
                message = {"role": "assistant", "content": f"answer to {question}"}
                if server.reasoning:
                    message["reasoning_content"] = f"thinking about {question}"
                self._send(200, {"id": "x", "object": "chat.completion", "choices": [{
                    "index": 0, "finish_reason": "stop", "message": message}],
                    "usage": {"completion_tokens": 7}})

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def prompts(path: Path, n: int, extra: list[dict] | None = None) -> Path:
    rows = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"question {i}"}]}
            for i in range(n)]
    return write_jsonl(path, rows + (extra or []))


def run_openai(tmp_path, server, prompt_file, **extra):
    return run_stage(generate, tmp_path, prompts=prompt_file, out=tmp_path / "gen",
                     backend="openai", endpoint=server.endpoint, model="tiny",
                     concurrency=4, retries=3, retry_delay=0.01, api_key_env="TEST_KEY",
                     expect_reasoning="yes", **extra)


def test_retries_reassembly_and_resume(tmp_path, server, monkeypatch):
    monkeypatch.setenv("TEST_KEY", "sekrit")
    rc, result = run_openai(tmp_path, server, prompts(tmp_path / "p.jsonl", 6))
    assert rc == 0 and result.ok
    samples = [json.loads(x) for x in (tmp_path / "gen" / "samples.jsonl").read_text().split("\n")
               if x]
    assert sorted(s["id"] for s in samples) == [f"q{i}" for i in range(6)]
    by_id = {s["id"]: s for s in samples}
    assert by_id["q3"]["messages"][-1] == {
        "role": "assistant", "content": "<think>thinking about question 3</think>answer to question 3"}
    assert all(server.requests[f"question {i}"] == 2 for i in range(6))  # one 500, one retry
    assert result.metrics["reasoning_capture"] == 1.0
    assert server.auth == {"Bearer sekrit"}
    assert "sekrit" not in (tmp_path / "gen" / "samples.jsonl").read_text()

    # Resume with two more prompts: only those two reach the server.
    before = sum(server.requests.values())
    rc, result = run_openai(tmp_path, server, prompts(tmp_path / "p.jsonl", 8))
    assert rc == 0 and result.ok
    assert sum(server.requests.values()) - before == 4  # 2 new prompts x (500 + retry)
    lines = (tmp_path / "gen" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 8 and len({json.loads(x)["id"] for x in lines}) == 8
    assert result.metrics["new_samples"] == 2


def test_non_retryable_error_fails_the_sample_and_the_check(tmp_path, server):
    extra = [{"id": "bad", "prompt": "a forbidden question"}]
    rc, result = run_openai(tmp_path, server, prompts(tmp_path / "p.jsonl", 2, extra))
    assert rc == 1
    assert server.requests["a forbidden question"] == 1  # 400 is not retried
    failed = [json.loads(x) for x in (tmp_path / "gen" / "failed.jsonl").read_text().splitlines()]
    assert [f["id"] for f in failed] == ["bad"] and "HTTP 400" in failed[0]["error"]
    check = {c.name: c for c in result.checks}["all_answered"]
    assert not check.passed and check.value == 2


def test_lost_reasoning_fails_the_capture_check(tmp_path):
    """A server that drops the reasoning (no parser, a template that swallowed the think
    tags: the seed's data bug) must fail the stage, not pass silently."""
    s = FakeServer(reasoning=False, fail_first=False)
    try:
        rc, result = run_openai(tmp_path, s, prompts(tmp_path / "p.jsonl", 3))
    finally:
        s.close()
    assert rc == 1
    check = {c.name: c for c in result.checks}["reasoning_capture"]
    assert not check.passed and check.value == 0.0
    assert result.metrics["samples"] == 3


def test_unknown_prompt_shape_names_file_and_line(tmp_path, server):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "fine"}, {"question": "not a shape"}])
    rc, result = run_openai(tmp_path, server, path)
    assert rc == 1 and result.error.startswith(f"{path}:2: unknown prompt shape")
    assert sum(server.requests.values()) == 0
