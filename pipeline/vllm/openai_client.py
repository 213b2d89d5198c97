"""A small client for OpenAI-compatible servers (vLLM): plain GETs and timed streaming.

Standard library only (``http.client``), so it runs on bare hosts and adds no client-side
overhead worth measuring against the server (``bench/serving/serving_client.py`` measures it).
One :class:`StreamTiming` per request records what a serving benchmark needs:

- ``ttft``: seconds from sending the request to the first generated text (content or
  reasoning) arriving;
- ``latency``: seconds until the stream's last data event (the usage chunk, before
  ``[DONE]``), where ``vllm bench serve`` ends it too;
- ``output_tokens``: the server's own ``usage.completion_tokens`` (asked for with
  ``stream_options.include_usage``), else the number of chunks that carried text. With
  speculative decoding one chunk often carries several tokens, so the fallback undercounts;
  ``usage_reported`` says which one was used.
- ``tpot``: ``(latency - ttft) / (output_tokens - 1)``, the mean time per output token after
  the first, as vLLM's own benchmark defines it;
- ``itl``: the inter-token latencies as ``vllm bench serve`` takes them: the gaps between
  successive stream chunks that carry a choice, from the first one with text on (with
  speculation one chunk carries several tokens, so these are per chunk, not per token);
- ``output``: the generated text (reasoning first, then content) and ``token_ids``, the
  generated token ids when the server sends them (vLLM does for ``return_token_ids: true``),
  so that two servers' answers to the same greedy request can be compared.

A :class:`Connections` (one per thread) keeps each server's connection open from one
streaming request to the next, as ``vllm bench serve`` does; without one, every request
opens and closes its own.

Errors never raise out of :func:`stream_request`: a refused connection, an HTTP error or a
broken stream is a failed :class:`StreamTiming` with the reason, so one bad request cannot
end a benchmark.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Connections", "HTTPAnswer", "StreamTiming", "get", "post_json", "stream_request"]

Clock = Callable[[], float]


@dataclass(frozen=True)
class HTTPAnswer:
    status: int | None          # None: no HTTP answer at all
    body: bytes = b""
    error: str | None = None    # why there was no answer

    @property
    def ok(self) -> bool:
        return self.status == 200

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8", "replace"))

    def describe(self) -> str:
        if self.status is None:
            return self.error or "no answer"
        text = " ".join(self.body.decode("utf-8", "replace").split())[:200]
        return f"HTTP {self.status}" + (f": {text}" if text else "")


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname, parts.port, timeout=timeout), _path(parts)


def _path(parts: urllib.parse.SplitResult) -> str:
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class Connections:
    """One thread's kept-alive connections, one per server, for requests sent one after
    another: as ``vllm bench serve``'s aiohttp connector keeps them (``keepalive_timeout``
    60 s). A connection per request instead makes the server accept and set up a
    connection for every answer, work that competes with streaming when the API server is
    the busy part (a small verifier at 64 requests in flight). A request on a kept
    connection the server has closed meanwhile is sent once more, on a fresh one."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str, int | None], http.client.HTTPConnection] = {}
        self.opened = 0  # connections made: what the tests and the bench count

    def send(self, url: str, data: bytes, headers: Mapping[str, str], timeout: float,
             clock: Clock) -> tuple[http.client.HTTPResponse, float]:
        """POST ``data``: the response and when the request was sent."""
        for attempt in (1, 2):
            conn, path, reused = self._get(url, timeout)
            started = clock()
            try:
                conn.request("POST", path, body=data, headers=dict(headers))
                return conn.getresponse(), started
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.drop(url)
                if not reused or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def release(self, url: str, resp: http.client.HTTPResponse) -> None:
        """Keep the connection of a response read to its end, unless the server closes
        it (an HTTP/1.0 server, or ``Connection: close``)."""
        if resp.will_close or not resp.isclosed():
            self.drop(url)

    def drop(self, url: str) -> None:
        conn = self._open.pop(self._key(url), None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._open.values():
            conn.close()
        self._open.clear()

    @staticmethod
    def _key(url: str) -> tuple[str, str, int | None]:
        parts = urllib.parse.urlsplit(url)
        return parts.scheme, parts.hostname or "", parts.port

    def _get(self, url: str, timeout: float) -> tuple[http.client.HTTPConnection, str, bool]:
        kept = self._open.get(self._key(url))
        if kept is not None:
            return kept, _path(urllib.parse.urlsplit(url)), True
        fresh, path = _connection(url, timeout)  # ValueError for a URL that is not http(s)
        self._open[self._key(url)] = fresh
        self.opened += 1
        return fresh, path, False


def _headers(api_key: str | None, json_body: bool) -> dict[str, str]:
    headers = {"Accept": "application/json, text/event-stream, text/plain"}
    if json_body:
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def get(url: str, *, timeout: float = 5.0, api_key: str | None = None) -> HTTPAnswer:
    """``GET url``; an HTTP error status is an answer, a network failure is not."""
    return _request("GET", url, None, timeout, api_key)


def post_json(url: str, body: Mapping[str, Any], *, timeout: float = 30.0,
              api_key: str | None = None) -> HTTPAnswer:
    """``POST url`` with a JSON body, not streamed; never raises."""
    return _request("POST", url, json.dumps(body).encode(), timeout, api_key)


def _request(method: str, url: str, data: bytes | None, timeout: float,
             api_key: str | None) -> HTTPAnswer:
    try:
        conn, path = _connection(url, timeout)
    except ValueError as exc:
        return HTTPAnswer(None, error=str(exc))
    try:
        conn.request(method, path, body=data, headers=_headers(api_key, data is not None))
        resp = conn.getresponse()
        return HTTPAnswer(resp.status, resp.read())
    except (OSError, http.client.HTTPException) as exc:
        return HTTPAnswer(None, error=_reason(exc))
    finally:
        conn.close()


@dataclass
class StreamTiming:
    ok: bool = False
    error: str | None = None
    started: float = 0.0          # clock value when the request was sent
    ttft: float | None = None
    latency: float | None = None
    output_tokens: int = 0
    usage_reported: bool = False
    chunks: int = 0
    text_chars: int = 0
    reasoning_chars: int = 0
    finish_reason: str | None = None
    output: str = ""
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None  # the prompt as the server tokenized it
    itl: list[float] = field(default_factory=list)

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.latency is None or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["prompt_token_ids"]  # the same few dozen ids on every request of a prompt
        return {**out, "tpot": self.tpot}


def _ids(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not value:
        return None
    return [x for x in value if isinstance(x, int) and not isinstance(x, bool)]


def _delta_text(choice: Mapping[str, Any]) -> tuple[str, str]:
    """(content, reasoning) text carried by one streamed choice, chat or completions."""
    if "text" in choice:  # /v1/completions
        return str(choice.get("text") or ""), ""
    delta = choice.get("delta") or {}
    content = delta.get("content") or ""
    # vLLM's reasoning parsers say `reasoning_content`; newer servers also `reasoning`.
    reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
    return str(content), str(reasoning)


def stream_request(base_url: str, path: str, body: Mapping[str, Any], *,
                   timeout: float = 600.0, api_key: str | None = None,
                   clock: Clock = time.perf_counter,
                   connections: Connections | None = None) -> StreamTiming:
    """POST a streaming chat/completions request and time it; never raises. With
    ``connections`` (one per thread) the connection is kept for the next request."""
    payload = {**body, "stream": True}
    payload.setdefault("stream_options", {"include_usage": True})
    data = json.dumps(payload).encode()
    timing = StreamTiming()
    reasoning_parts: list[str] = []
    content_parts: list[str] = []
    url = base_url.rstrip("/") + path
    pool = connections if connections is not None else Connections()
    resp: http.client.HTTPResponse | None = None
    try:
        try:
            resp, timing.started = pool.send(url, data, _headers(api_key, True), timeout,
                                             clock)
        except ValueError as exc:
            timing.error = str(exc)
            return timing
        if resp.status != 200:
            answer = HTTPAnswer(resp.status, resp.read())
            timing.error = answer.describe()
            return timing
        done = False
        last_event: float | None = None   # when the last data event arrived
        last_chunk: float | None = None   # when the last chunk with a choice arrived
        while not done:
            raw = resp.readline()
            if not raw:
                break
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments (": ping"), event names
            chunk = line[5:].strip()
            if chunk == b"[DONE]":
                done = True
                break
            try:
                event = json.loads(chunk)
            except ValueError:
                timing.error = f"bad stream chunk: {chunk[:120]!r}"
                return timing
            if isinstance(event, dict) and event.get("error"):
                err = event["error"]
                timing.error = "server error: " + str(err.get("message") if isinstance(
                    err, dict) else err)[:300]
                return timing
            now = last_event = clock()
            usage = event.get("usage") if isinstance(event, dict) else None
            if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                timing.output_tokens = int(usage["completion_tokens"])
                timing.usage_reported = True
            choices = event.get("choices") or []
            if timing.prompt_token_ids is None:
                # vLLM sends it once, with return_token_ids: on the first chat chunk, and
                # on the first choice of a completions stream
                timing.prompt_token_ids = _ids(event.get("prompt_token_ids")) or next(
                    (_ids(c.get("prompt_token_ids")) for c in choices
                     if isinstance(c, dict) and c.get("prompt_token_ids")), None)
            if choices and timing.ttft is not None:
                timing.itl.append(now - last_chunk)  # type: ignore[operator]
            for choice in choices:
                content, reasoning = _delta_text(choice)
                if content or reasoning:
                    if timing.ttft is None:
                        timing.ttft = now - timing.started
                    timing.chunks += 1
                    timing.text_chars += len(content)
                    timing.reasoning_chars += len(reasoning)
                    content_parts.append(content)
                    reasoning_parts.append(reasoning)
                ids = choice.get("token_ids")
                if isinstance(ids, list):
                    if timing.token_ids is None:
                        timing.token_ids = []
                    timing.token_ids.extend(x for x in ids if isinstance(x, int)
                                            and not isinstance(x, bool))
                if choice.get("finish_reason"):
                    timing.finish_reason = choice["finish_reason"]
            if choices and timing.ttft is not None:
                last_chunk = now
        end = last_event if last_event is not None else clock()
        timing.latency = end - timing.started
        timing.output = "".join(reasoning_parts) + "".join(content_parts)
        if not done:
            timing.error = "stream ended without [DONE]"
            return timing
        resp.read()  # the chunked body's end, after [DONE]: the connection is then free
        if not timing.usage_reported:
            timing.output_tokens = timing.chunks
        if timing.ttft is None:
            timing.error = "no text was generated"
            return timing
        timing.ok = True
        return timing
    except (OSError, http.client.HTTPException) as exc:
        timing.error = _reason(exc)
        return timing
    finally:
        if resp is not None and connections is not None and timing.ok:
            pool.release(url, resp)
        else:
            pool.drop(url)
