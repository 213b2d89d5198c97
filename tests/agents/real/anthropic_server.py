"""A scripted Anthropic Messages API on 127.0.0.1, for the real Claude Code.

Claude Code reaches it through ``ANTHROPIC_BASE_URL`` with a dummy key. The server
records every request body (the truth of what the agent is shown) and answers each
``POST /v1/messages``, streaming (server-sent events) or not, with what the test's script
says: text, tool calls, or both. ``POST /v1/messages/count_tokens`` gets a small count.

Each answer names the model the request asked for, whatever it is, so every Claude Code
version runs on its own default model (:data:`DEFAULT_MODELS`, read from their request
bodies); ``GET /v1/models`` lists those, as the real API lists the models a key may use.

The script is a function of the request and the agent turns before it to a
:class:`Reply`. Loops are bounded: past ``max_requests`` every request is answered with
a plain "done." (``end_turn``), so the program stops, and the test sees the overrun.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.agents.real import local_http
from tests.agents.real.local_http import JSONHandler, ScriptedServer


@dataclass
class ToolCall:
    name: str
    input: dict[str, Any]


@dataclass
class Reply:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 200


class Request(local_http.Request):
    """A Messages API request, read as Claude Code means it."""

    @property
    def tools(self) -> list[str]:
        return [t.get("name", "") for t in self.body.get("tools") or []
                if isinstance(t, dict)]

    @property
    def deferred(self) -> list[str]:
        """The tools Claude Code names without their schema (2.1.332: in a message of its
        own, "The following deferred tools are now available via ToolSearch ...:" and a
        name a line; again, with the newcomers, when an MCP server connects late), which a
        model loads with ``ToolSearch`` before it calls them."""
        text = self.plain
        names: list[str] = []
        at = text.find(DEFERRED_HEAD)
        while at >= 0:
            for line in text[text.find(":\n", at) + 2:].splitlines():
                if not line.strip() or " " in line.strip():
                    break
                names.append(line.strip())
            at = text.find(DEFERRED_HEAD, at + 1)
        return list(dict.fromkeys(names))

    def loaded(self, name: str) -> bool:
        """Whether the model may call tool ``name`` as it is: its schema is in ``tools``
        (a deferred tool is, once ``ToolSearch`` loaded it)."""
        return name in self.tools

    @property
    def agent_turn(self) -> bool:
        """A turn of the agent's own loop (it offers tools), not a side request (a title,
        a compaction summary)."""
        return bool(self.tools) and self.path.startswith("/v1/messages") \
            and not self.path.endswith("count_tokens")

    @property
    def compaction(self) -> bool:
        """Claude Code asking for the summary of a compaction (it offers the tools, but
        tells the model to use none)."""
        return self.agent_turn and "Respond with TEXT ONLY" in self.last_user_text()

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    def after_last_turn(self) -> list[dict[str, Any]]:
        """The messages after the model's last turn: tool results, and what Claude Code
        put beside them (hook context comes as system reminders, or as messages of role
        ``system``)."""
        msgs = self.messages
        last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"),
                   default=-1)
        return msgs[last + 1:]

    def tool_results(self) -> list[str]:
        """The text of every tool_result after the model's last turn."""
        out = []
        for msg in self.after_last_turn():
            content = msg.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    if isinstance(inner, str):
                        out.append(inner)
                    elif isinstance(inner, list):
                        out.append("".join(b.get("text", "") for b in inner
                                           if isinstance(b, dict)))
        return out

    def last_user_text(self) -> str:
        """Everything after the model's last turn, as one string."""
        return json.dumps(self.after_last_turn(), ensure_ascii=False)


Script = Callable[[Request, list[Request]], Reply]
DEFERRED_HEAD = "The following deferred tools are now available via ToolSearch"
# The model each tested Claude Code version asks for when nothing chooses one (its
# request bodies): since 2.1.233 the default model is one the todo tools are gated on.
DEFAULT_MODELS = {"2.1.197": "claude-opus-4-8", "2.1.332": "claude-opus-5-5"}


class AnthropicServer(ScriptedServer):
    """``with AnthropicServer(script) as api:`` serves on ``api.url`` until the block ends."""

    def __init__(self, script: Script, *, max_requests: int = 40):
        self._ids = itertools.count(1)
        super().__init__(self._handler(), script, max_requests=max_requests,
                         done=Reply(text="done."))

    def _message(self, reply: Reply, model: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        n = next(self._ids)
        blocks: list[dict[str, Any]] = []
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        for i, call in enumerate(reply.calls):
            blocks.append({"type": "tool_use", "id": f"toolu_{n:04d}_{i}", "name": call.name,
                           "input": call.input})
        if not blocks:
            blocks.append({"type": "text", "text": "done."})
        usage = {"input_tokens": reply.input_tokens, "output_tokens": 20,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        msg = {"id": f"msg_{n:06d}", "type": "message", "role": "assistant",
               "model": model, "content": blocks,
               "stop_reason": "tool_use" if reply.calls else "end_turn",
               "stop_sequence": None, "usage": usage}
        return msg, blocks

    def _events(self, reply: Reply, model: str) -> list[tuple[str, dict[str, Any]]]:
        msg, blocks = self._message(reply, model)
        start = dict(msg, content=[], stop_reason=None,
                     usage=dict(msg["usage"], output_tokens=1))
        out: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})]
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                out.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                    "content_block": {"type": "text",
                                                                      "text": ""}}))
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                out.append(("content_block_start", {
                    "type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": block["id"],
                                      "name": block["name"], "input": {}}}))
                delta = {"type": "input_json_delta",
                         "partial_json": json.dumps(block["input"], ensure_ascii=False)}
            out.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": delta}))
            out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        out.append(("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": msg["stop_reason"],
                                                "stop_sequence": None},
                                      "usage": {"output_tokens": 20}}))
        out.append(("message_stop", {"type": "message_stop"}))
        return out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0].rstrip("/").endswith("/v1/models"):
                    self.send_json(200, {"data": [
                        {"type": "model", "id": m, "display_name": m,
                         "created_at": "2026-01-01T00:00:00Z"}
                        for m in sorted(set(DEFAULT_MODELS.values()))],
                        "has_more": False})
                    return
                self.send_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                            "message": self.path}})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = self.read_json()
                path = self.path.split("?", 1)[0]
                if path.endswith("/count_tokens"):
                    self.send_json(200, {"input_tokens": 200})
                    return
                if not path.endswith("/v1/messages"):
                    self.send_json(404, {"type": "error",
                                     "error": {"type": "not_found_error", "message": path}})
                    return
                reply = server.reply_for(Request(path, body, time.time()))
                model = str(body.get("model") or "claude")
                if not body.get("stream"):
                    self.send_json(200, server._message(reply, model)[0])
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for name, data in server._events(reply, model):
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        return Handler
