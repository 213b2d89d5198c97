"""What the scripted model servers share (anthropic_server.py for Claude Code,
model_server.py for Codex and opencode, gemini_server.py for Gemini CLI): a threaded HTTP
server on a free port of 127.0.0.1 for the length of a ``with`` block, a quiet handler
that reads and answers JSON, the record of one request, and the scripted answering with
its bounds."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self


@dataclass
class Request:
    """One request a scripted server received: the truth of what the program was shown."""

    path: str
    body: dict[str, Any]
    at: float = 0.0  # time.time() when it arrived

    @property
    def text(self) -> str:
        """The whole body as one string (for ``in`` checks)."""
        return json.dumps(self.body, ensure_ascii=False)

    @property
    def plain(self) -> str:
        """Every string in the body, decoded, one after another (for ``in`` checks on
        text with quotes in it, which :attr:`text` shows escaped)."""
        out: list[str] = []
        stack: list[Any] = [self.body]
        while stack:
            value = stack.pop()
            if isinstance(value, str):
                out.append(value)
            elif isinstance(value, dict):
                stack.extend(reversed(list(value.values())))
            elif isinstance(value, list):
                stack.extend(reversed(value))
        return "\n".join(out)


class LocalServer:
    """``with Sub(...) as srv:`` serves ``handler`` on 127.0.0.1 until the block ends."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        # A program that keeps its connection open must not hold up the block's end.
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class JSONHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with no access log on stderr (the test's output is the program's)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_json(self, code: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_json(self) -> dict[str, Any]:
        """The request body; one that is not JSON is kept whole under ``unparsed``, so the
        recorded requests still show what the program sent."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {"unparsed": raw.decode("utf-8", "replace")}


class ScriptedServer(LocalServer):
    """What the servers whose turns a test scripts share: every request recorded (and
    written to ``dump_to`` when the block ends, to read when a test fails), the script's
    answer for each agent turn, and a bound on the loop: past ``max_requests``, or when
    the script itself fails (kept in ``errors``), the answer is ``done``, which ends the
    agent's turn."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], script: Any, *,
                 max_requests: int, done: Any):
        self.script = script
        self.max_requests = max_requests
        self.requests: list[Any] = []
        self.dump_to: Path | None = None
        self.errors: list[str] = []
        self._done = done
        super().__init__(handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def agent_turns(self) -> list[Any]:
        with self._lock:
            return [r for r in self.requests if r.agent_turn]

    def dump(self, path: Path) -> None:
        """Every request body, to read when a test fails."""
        with self._lock:
            path.write_text(json.dumps([{"path": r.path, "at": r.at, "body": r.body}
                                        for r in self.requests], indent=1, ensure_ascii=False))

    def __exit__(self, *exc: object) -> None:
        self.dump(self.dump_to) if self.dump_to else None
        super().__exit__(*exc)

    def answer(self, req: Any, before: list[Any]) -> Any:
        """The reply to one request (a subclass answers its side requests here first)."""
        return self.script(req, before)

    def reply_for(self, req: Any) -> Any:
        with self._lock:
            before = [r for r in self.requests if r.agent_turn]
            self.requests.append(req)
            over = len(self.requests) > self.max_requests
        if over:
            return self._done
        try:
            return self.answer(req, before)
        except Exception as exc:  # the test's script failed: say so, end the turn
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return self._done
