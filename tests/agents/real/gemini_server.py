"""A scripted Gemini API on 127.0.0.1, for the real Gemini CLI.

Gemini CLI reaches it through ``GOOGLE_GEMINI_BASE_URL`` with a dummy ``GEMINI_API_KEY``
(and ``security.auth.selectedType: gemini-api-key`` in its settings). It sends, under
``/v1beta/models/<model>:``:

* ``generateContent`` from its router (a JSON ``complexity_score`` is asked for, by
  ``generationConfig.responseJsonSchema``), before each prompt;
* ``streamGenerateContent?alt=sse`` for every turn of the agent (it offers the tools);
* ``generateContent`` twice when it compresses its chat: the summary ("Generate a new
  <state_snapshot> ..."), then a check of it.

The server records every request body and answers agent turns with what the test's
script says (text, function calls, and the ``promptTokenCount`` to report, which is what
makes Gemini CLI compress); side requests get fixed answers. Loops are bounded: past
``max_requests`` every turn is answered with a plain "done.", so the program stops.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.agents.real import local_http
from tests.agents.real.local_http import JSONHandler, ScriptedServer

SUMMARY = "<state_snapshot>The drafter work is planned in the tracker.</state_snapshot>"


@dataclass
class Call:
    name: str
    args: dict[str, Any]


@dataclass
class Reply:
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    prompt_tokens: int = 200  # what usageMetadata says the prompt took


class Request(local_http.Request):
    """A Gemini API request, read as Gemini CLI means it."""

    @property
    def model(self) -> str:
        return self.path.rsplit("/", 1)[-1].split(":", 1)[0]

    @property
    def method(self) -> str:
        return self.path.split(":", 1)[-1].split("?", 1)[0]

    @property
    def tools(self) -> list[str]:
        return [d.get("name", "") for t in self.body.get("tools") or [] if isinstance(t, dict)
                for d in t.get("functionDeclarations") or [] if isinstance(d, dict)]

    @property
    def router(self) -> bool:
        schema = json.dumps((self.body.get("generationConfig") or {})
                            .get("responseJsonSchema") or {})
        return self.method == "generateContent" and "complexity_score" in schema

    @property
    def agent_turn(self) -> bool:
        return self.method == "streamGenerateContent"

    @property
    def contents(self) -> list[dict[str, Any]]:
        return list(self.body.get("contents") or [])

    def after_last_turn(self) -> list[dict[str, Any]]:
        """The contents after the model's last turn: the prompt, or the tools' results
        (where hook context rides)."""
        msgs = self.contents
        last = max((i for i, m in enumerate(msgs) if m.get("role") == "model"), default=-1)
        return msgs[last + 1:]

    def last_user_text(self) -> str:
        """Everything after the model's last turn, as one string."""
        return json.dumps(self.after_last_turn(), ensure_ascii=False)

    def tool_results(self) -> list[str]:
        """The output of every function response after the model's last turn."""
        out = []
        for msg in self.after_last_turn():
            for part in msg.get("parts") or []:
                resp = part.get("functionResponse") if isinstance(part, dict) else None
                if isinstance(resp, dict):
                    inner = resp.get("response") or {}
                    out.append(str(inner.get("output", inner.get("error", ""))))
        return out


Script = Callable[[Request, list[Request]], Reply]


class GeminiServer(ScriptedServer):
    """``with GeminiServer(script) as api:`` serves on ``api.url`` until the block ends."""

    def __init__(self, script: Script, *, max_requests: int = 40, summary: str = SUMMARY):
        self.summary = summary
        super().__init__(self._handler(), script, max_requests=max_requests,
                         done=Reply(text="done."))

    @property
    def summaries(self) -> list[Request]:
        """The compression's requests (the summary, and its check)."""
        with self._lock:
            return [r for r in self.requests if r.method == "generateContent"
                    and not r.router]

    def answer(self, req: Request, before: list[Request]) -> Reply:
        if req.router:
            return Reply(text=json.dumps({"complexity_reasoning": "a plan to keep",
                                          "complexity_score": 20}))
        if not req.agent_turn:
            return Reply(text=self.summary)
        return self.script(req, before)

    @staticmethod
    def response(reply: Reply) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if reply.text:
            parts.append({"text": reply.text})
        parts += [{"functionCall": {"name": c.name, "args": c.args}} for c in reply.calls]
        if not parts:
            parts.append({"text": "done."})
        return {"candidates": [{"content": {"role": "model", "parts": parts},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": reply.prompt_tokens,
                                  "candidatesTokenCount": 20,
                                  "totalTokenCount": reply.prompt_tokens + 20}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:
                self.send_json(404, {"error": {"code": 404, "message": self.path,
                                               "status": "NOT_FOUND"}})

            def do_POST(self) -> None:
                body = self.read_json()
                req = Request(self.path, body, time.time())
                if req.method == "countTokens":
                    self.send_json(200, {"totalTokens": 200})
                    return
                if req.method not in ("generateContent", "streamGenerateContent"):
                    self.send_json(404, {"error": {"code": 404, "message": self.path,
                                                   "status": "NOT_FOUND"}})
                    return
                doc = server.response(server.reply_for(req))
                if not req.agent_turn:
                    self.send_json(200, doc)
                    return
                data = f"data: {json.dumps(doc)}\r\n\r\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
