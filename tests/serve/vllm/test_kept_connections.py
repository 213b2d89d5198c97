"""The client keeps one connection per worker, as vllm bench serve does: against a real
HTTP/1.1 server that streams SSE in chunks, counting the connections it accepts."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.eagle3.serving.load_levels import Level, run_level
from pipeline.vllm.openai_client import Connections, stream_request


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    accepted = 0
    close_quietly = False  # end each connection after its answer, without saying so

    def get_request(self):
        got = super().get_request()
        self.accepted += 1
        return got


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("a", "b")]
        events.append({"choices": [], "usage": {"completion_tokens": 2}})
        for ev in [*(json.dumps(e) for e in events), "[DONE]"]:
            data = f"data: {ev}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if self.server.close_quietly:  # type: ignore[attr-defined]
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: _Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_one_connection_serves_a_workers_requests(server: _Server) -> None:
    kept = Connections()
    answers = [stream_request(_url(server), "/v1/chat/completions", BODY, timeout=10,
                              connections=kept) for _ in range(6)]
    kept.close()
    assert all(t.ok and t.output == "ab" and t.output_tokens == 2 for t in answers)
    assert server.accepted == 1 and kept.opened == 1


def test_without_a_pool_each_request_opens_its_own(server: _Server) -> None:
    answers = [stream_request(_url(server), "/v1/chat/completions", BODY, timeout=10)
               for _ in range(3)]
    assert all(t.ok for t in answers)
    assert server.accepted == 3


def test_a_connection_the_server_closed_is_opened_again_once(server: _Server) -> None:
    server.close_quietly = True
    kept = Connections()
    answers = [stream_request(_url(server), "/v1/chat/completions", BODY, timeout=10,
                              connections=kept) for _ in range(3)]
    kept.close()
    # each request after the first finds its kept connection closed, and is sent again
    assert all(t.ok and t.output == "ab" for t in answers), [t.error for t in answers]
    assert server.accepted == 3 and kept.opened == 3


def test_a_level_opens_a_connection_per_worker_not_per_request(server: _Server) -> None:
    level = Level("baseline", _url(server), 4, 24)
    run_level(level, [("/v1/chat/completions", BODY)], timeout=10, api_key=None)
    assert len(level.ok) == 24
    assert server.accepted <= 4
