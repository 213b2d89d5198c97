"""An OpenAI-compatible chat endpoint (vLLM, SGLang, ...) through ``urllib``. Standard library.

Non-streaming ``POST {endpoint}/chat/completions``. Transient failures (connection errors,
timeouts, 408/409/429/5xx) are retried with exponential backoff; other HTTP errors fail the
sample at once. The API key is read from an environment variable and never logged.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class RequestFailed(Exception):
    """A request that failed for good (after retries, or with a non-retryable status)."""


@dataclass
class Completion:
    content: str
    reasoning: str | None
    finish_reason: str | None
    completion_tokens: int | None
    attempts: int = 1


@dataclass
class OpenAIBackend:
    endpoint: str
    model: str
    api_key: str | None = None
    timeout: float = 600.0
    retries: int = 5
    retry_delay: float = 1.0
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.endpoint.rstrip("/") + "/chat/completions"

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float,
                 top_p: float, seed: int | None) -> Completion:
        body: dict[str, Any] = {"model": self.model, "messages": messages,
                                "max_tokens": max_tokens, "temperature": temperature,
                                "top_p": top_p, "stream": False}
        if seed is not None:
            body["seed"] = seed
        body.update(self.extra_body)
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                # Full jitter keeps many threads from retrying in lockstep against a
                # server that is restarting.
                time.sleep(random.uniform(0.5, 1.0) * self.retry_delay * 2 ** (attempt - 1))
            request = urllib.request.Request(self.url, data=data, headers=headers,
                                             method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                    payload = json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                detail = _error_text(exc)
                last = f"HTTP {exc.code}: {detail}"
                if exc.code in RETRYABLE_STATUS:
                    continue
                raise RequestFailed(last) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
                continue
            except json.JSONDecodeError as exc:
                last = f"response is not JSON ({exc.msg})"
                continue
            completion = parse_response(payload)
            completion.attempts = attempt + 1
            return completion
        raise RequestFailed(f"gave up after {self.retries + 1} attempts; last: {last}")


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read().decode("utf-8", "replace")[:200].replace("\n", " ")
    except Exception:
        return exc.reason if isinstance(exc.reason, str) else ""


def parse_response(payload: Any) -> Completion:
    """One non-streaming chat completion -> :class:`Completion`; odd shapes raise RequestFailed."""
    from pipeline.eagle3.text.chat import reasoning_of

    try:
        choice = payload["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise RequestFailed(f"unexpected response shape: {str(payload)[:200]}") from None
    usage = payload.get("usage") or {}
    return Completion(content=message.get("content") or "", reasoning=reasoning_of(message),
                      finish_reason=choice.get("finish_reason"),
                      completion_tokens=usage.get("completion_tokens"))
