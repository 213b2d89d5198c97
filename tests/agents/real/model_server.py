"""A scripted model on 127.0.0.1 for the real agent programs: it speaks the OpenAI
Responses API (Codex) and Chat Completions (opencode), both streaming, records every
request body, and answers each request with what the test's script says.

The script is a function of the request (its parsed body, and how many came before) to a
:class:`Reply`: text, tool calls, or both. Loops are bounded: past ``max_requests`` the
server answers every request with a plain "done." so the program ends its turn, and the
test sees the overrun in :attr:`ModelServer.requests`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.agents.real.local_http import JSONHandler, LocalServer, Request


@dataclass
class Call:
    name: str
    arguments: dict[str, Any]


@dataclass
class Reply:
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    # The usage the model reports: a high total makes Codex compact on its own.
    total_tokens: int = 100


Script = Callable[[Request, int], Reply]


class ModelServer(LocalServer):
    def __init__(self, script: Script, *, max_requests: int = 30):
        self.script = script
        self.max_requests = max_requests
        self.requests: list[Request] = []
        self._ids = 0
        super().__init__(self._handler())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    def answer(self, path: str, body: dict[str, Any]) -> Reply:
        with self._lock:
            req = Request(path, body)
            self.requests.append(req)
            n = len(self.requests) - 1
        if n >= self.max_requests:
            return Reply(text="done.")
        return self.script(req, n)

    # -- the two wire formats ------------------------------------------------------------

    def responses_events(self, reply: Reply) -> list[dict[str, Any]]:
        rid = f"resp_{self._next_id()}"
        items: list[dict[str, Any]] = []
        if reply.text:
            items.append({"type": "message", "role": "assistant", "id": f"msg_{rid}",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": reply.text,
                                       "annotations": []}]})
        for call in reply.calls:
            n = self._next_id()
            items.append({"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                          "name": call.name, "arguments": json.dumps(call.arguments),
                          "status": "completed"})
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}]
        for i, item in enumerate(items):
            events.append({"type": "response.output_item.added", "output_index": i,
                           "item": item})
            events.append({"type": "response.output_item.done", "output_index": i,
                           "item": item})
        usage = {"input_tokens": reply.total_tokens - 10, "output_tokens": 10,
                 "total_tokens": reply.total_tokens,
                 "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens_details": {"reasoning_tokens": 0}}
        events.append({"type": "response.completed",
                       "response": {"id": rid, "status": "completed", "output": items,
                                    "usage": usage}})
        return events

    def chat_chunks(self, reply: Reply, model: str) -> list[dict[str, Any]]:
        cid = f"chatcmpl-{self._next_id()}"
        base = {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": model}
        chunks: list[dict[str, Any]] = []
        if reply.text:
            chunks.append({**base, "choices": [{"index": 0, "delta": {
                "role": "assistant", "content": reply.text}, "finish_reason": None}]})
        for i, call in enumerate(reply.calls):
            n = self._next_id()
            chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": i, "id": f"call_{n}", "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }]}, "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": 0, "delta": {},
                                            "finish_reason": "tool_calls" if reply.calls
                                            else "stop"}],
                       "usage": {"prompt_tokens": reply.total_tokens - 10,
                                 "completion_tokens": 10,
                                 "total_tokens": reply.total_tokens}})
        return chunks

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self.send_json(200, {"object": "list", "data": [
                        {"id": "scripted", "object": "model", "owned_by": "test"}]})
                else:
                    self.send_json(404, {"error": {"message": f"no {self.path}"}})

            def do_POST(self) -> None:
                body = self.read_json()
                path = self.path.split("?")[0]
                if path.endswith("/responses"):
                    events = server.responses_events(server.answer(path, body))
                    self._stream([(e["type"], e) for e in events], done=False)
                elif path.endswith("/chat/completions"):
                    reply = server.answer(path, body)
                    chunks = server.chat_chunks(reply, str(body.get("model", "scripted")))
                    self._stream([(None, c) for c in chunks], done=True)
                else:
                    with server._lock:
                        server.requests.append(Request(path, body))
                    self.send_json(404, {"error": {"message": f"no {path}"}})

            def _stream(self, events: list[tuple[str | None, dict[str, Any]]],
                        done: bool) -> None:
                parts = []
                for name, data in events:
                    head = f"event: {name}\n" if name else ""
                    parts.append(f"{head}data: {json.dumps(data)}\n\n")
                if done:
                    parts.append("data: [DONE]\n\n")
                payload = "".join(parts).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
