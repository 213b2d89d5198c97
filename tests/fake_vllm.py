#!/usr/bin/env python3
"""A stand-in for ``vllm serve``: the same command line, HTTP API and ``/metrics`` text.

vLLM cannot run here (no GPU), so the serve and benchmark stages are tested against this
server. It is started exactly as vLLM would be (``fake_vllm.py serve MODEL --port P
--speculative-config JSON ...``) by the serve action, as a detached job over the test sshd.
It speaks ``/health``, ``/v1/models``, ``/v1/chat/completions`` and ``/v1/completions``
(streaming SSE with chunked transfer, and not) and ``/metrics`` in vLLM's exposition format,
with spec-decode counters that agree with the tokens it streams.

How it decodes: one "step" per ``--fake-step-ms``. Without speculation a step emits one
token. With ``--speculative-config`` (k draft tokens) a step costs ``1 + k *
--fake-draft-cost`` times longer and emits ``1 + a`` tokens, where draft position ``i`` is
accepted with probability ``--fake-acceptance[i]`` given the ones before it (seeded per
prompt, so runs repeat). When the drafter's files can tell (an lm_head and d2t beside a
target lm_head that are not all zeros), each probability is scaled by the share of draft
rows that score the target token d2t maps them to (:func:`head_alignment`): a drafter
whose rows were permuted against its vocab mapping drafts wrong tokens, served or not.
Each step adds 1 draft, k draft tokens and ``a`` accepted tokens
(positions ``0..a-1``) to the counters, as vLLM counts them.

Flags to misbehave, for the bad-input tests: ``--fake-die-after`` (exit during start with
``--fake-die-message``), ``--fake-never-healthy``, ``--fake-no-spec-metrics``,
``--fake-eagle3-types`` (refuse a target model_type the way the allow-list of vLLM
0.10 to 0.20 did, when the speculative config is parsed), ``--fake-no-eagle3-interface
ARCHS`` (refuse targets of those architectures the way vLLM 0.33 does: no list, the
model class lacks ``SupportsEagle3``, found by the engine core when it loads the model),
``--fake-engine-child`` (a second process in the group, like vLLM's EngineCore),
``--fake-diverge-after N`` (a lossy engine: from the Nth generated token on, the words are
not the ones plain decoding gives),
``--fake-ignore-term`` (only SIGKILL stops it), ``--fake-engines N`` (per-engine labels).
``--fake-die-in-capture`` (with a speculation schedule, die in the drafter's CUDA-graph
capture as vLLM 0.26.0's V2 runner does, with its traceback; a fixed k starts),
``--fake-v1-runner`` (with a speculation schedule, log vLLM's switch to piecewise CUDA
graphs, as its V1 model runner does),
``--fake-slow-after N`` (steps take ``--fake-slow-factor`` times longer for every request
after the first N: a server that slows down between two trials).
``--fake-tie-margin M``: asked for ``logprobs`` on a prompt of token ids (as the benchmark
asks where two answers part), the plain token leads the one a ``--fake-diverge-after``
server gives there by M nats (default 6: no near-tie). With ``return_token_ids`` the first
chunk carries the prompt's ids (>= 1000; generated ids are below 97), as vLLM's does.
``--fake-natural-len``: an answer ends by itself (``finish_reason: stop``) at a length drawn
from its prompt, unless the request says ``ignore_eos``; without it every answer runs to
``max_tokens``.

Standard library only: it must start on any host the tests reach.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

VERSION = "0.0.0+fake"


def log(level: str, where: str, message: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"(APIServer pid={os.getpid()}) {level} {stamp} [{where}] {message}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    if argv and argv[0] in ("--version", "-v"):
        print(VERSION)
        sys.exit(0)
    parser = argparse.ArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("model")
    s.add_argument("--host", default="0.0.0.0")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--speculative-config", type=json.loads, default=None)
    s.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    s.add_argument("--max-model-len", type=int, default=None)
    s.add_argument("--served-model-name", nargs="+", default=None)
    s.add_argument("--reasoning-parser", default=None)
    s.add_argument("--trust-remote-code", action="store_true")
    s.add_argument("--gpu-memory-utilization", type=float, default=None)
    s.add_argument("--kv-cache-memory-bytes", type=int, default=None)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--fake-step-ms", type=float, default=2.0)
    s.add_argument("--fake-draft-cost", type=float, default=0.25)
    s.add_argument("--fake-acceptance", default="0.8,0.6,0.4")
    s.add_argument("--fake-startup-s", type=float, default=0.2)
    s.add_argument("--fake-die-after", type=float, default=None)
    s.add_argument("--fake-die-message", default="RuntimeError: CUDA error: out of memory")
    s.add_argument("--fake-never-healthy", action="store_true")
    s.add_argument("--fake-no-spec-metrics", action="store_true")
    s.add_argument("--fake-eagle3-types", default=None)
    s.add_argument("--fake-no-eagle3-interface", default=None)
    s.add_argument("--fake-engine-child", action="store_true")
    s.add_argument("--fake-ignore-term", action="store_true")
    s.add_argument("--fake-engines", type=int, default=1)
    s.add_argument("--fake-record", default=None)
    s.add_argument("--fake-diverge-after", type=int, default=None)
    s.add_argument("--fake-natural-len", action="store_true")
    s.add_argument("--fake-slow-after", type=int, default=None)
    s.add_argument("--fake-v1-runner", action="store_true")
    s.add_argument("--fake-die-in-capture", action="store_true")
    s.add_argument("--fake-slow-factor", type=float, default=4.0)
    s.add_argument("--fake-tie-margin", type=float, default=6.0)
    return parser.parse_args(argv)


class Engine:
    """Token generation and the counters it leaves, shared by all request threads."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        spec = args.speculative_config or {}
        self.k = int(spec.get("num_speculative_tokens") or 0) if spec else 0
        probs = [float(x) for x in args.fake_acceptance.split(",") if x.strip()]
        self.accept = (probs + [0.0] * self.k)[: self.k]
        if self.k and spec.get("model"):
            share = head_alignment(Path(str(spec["model"])), Path(args.model))
            if share is not None:
                # a draft row that scores another token than its d2t one proposes a wrong
                # token: position i is accepted only where the rows line up
                self.accept = [p * share for p in self.accept]
                log("INFO", "eagle.py:1", f"drafter lm_head: {share:.0%} of its sampled "
                                          "rows score the target token d2t maps them to")
        self.lock = threading.Lock()
        self.engines = [str(i) for i in range(max(1, args.fake_engines))]
        self.counters = {e: {"drafts": 0, "draft_tokens": 0, "accepted": 0,
                             "per_pos": [0] * self.k, "generation": 0, "prompt": 0,
                             "requests": 0} for e in self.engines}
        self.running = 0
        self.started = 0   # requests begun, over the server's life
        # vLLM serves every --served-model-name and labels its metrics with the first
        self.served_names = list(args.served_model_name or [args.model])
        self.served_name = self.served_names[0]

    def steps(self, key: str, max_tokens: int, engine: str):
        """Yield the number of tokens each decoding step emits, counting as vLLM does."""
        rng = random.Random(f"{self.args.seed}:{key}")
        step_s = self.args.fake_step_ms / 1000.0
        if self.k:
            step_s *= 1 + self.args.fake_draft_cost * self.k
        slow = self.args.fake_slow_after
        if slow is not None and self.started > slow:
            step_s *= self.args.fake_slow_factor
        left = max_tokens
        while left > 0:
            time.sleep(step_s)
            accepted = 0
            if self.k:
                for p in self.accept:
                    if rng.random() < p:
                        accepted += 1
                    else:
                        break
                accepted = min(accepted, left - 1)
            emitted = 1 + accepted
            with self.lock:
                c = self.counters[engine]
                c["generation"] += emitted
                if self.k:
                    c["drafts"] += 1
                    c["draft_tokens"] += self.k
                    c["accepted"] += accepted
                    for i in range(accepted):
                        c["per_pos"][i] += 1
            left -= emitted
            yield emitted

    def metrics(self) -> str:
        m = self.served_name.replace("\\", "\\\\").replace('"', '\\"')
        out: list[str] = []

        def counter(name: str, help_text: str, rows: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name}_total {help_text}")
            out.append(f"# TYPE {name}_total counter")
            for labels, value in rows:
                out.append(f"{name}_total{{{labels}}} {float(value)}")
                out.append(f"{name}_created{{{labels}}} 1.7330176e+09")

        with self.lock:
            snap = {e: {k: (list(v) if isinstance(v, list) else v) for k, v in c.items()}
                    for e, c in self.counters.items()}
            running = self.running
        lab = {e: f'engine="{e}",model_name="{m}"' for e in self.engines}
        out.append("# HELP vllm:num_requests_running Number of requests in model execution "
                   "batches.")
        out.append("# TYPE vllm:num_requests_running gauge")
        out.append(f'vllm:num_requests_running{{{lab["0"]}}} {float(running)}')
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                [(lab[e], snap[e]["prompt"]) for e in self.engines])
        counter("vllm:generation_tokens", "Number of generation tokens processed.",
                [(lab[e], snap[e]["generation"]) for e in self.engines])
        counter("vllm:request_success", "Count of successfully processed requests.",
                [(lab[e] + ',finished_reason="length"', snap[e]["requests"])
                 for e in self.engines])
        if self.k and not self.args.fake_no_spec_metrics:
            counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                    [(lab[e], snap[e]["drafts"]) for e in self.engines])
            counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                    [(lab[e], snap[e]["draft_tokens"]) for e in self.engines])
            counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                    [(lab[e], snap[e]["accepted"]) for e in self.engines])
            counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                    "Accepted tokens per draft position.",
                    [(lab[e] + f',position="{i}"', snap[e]["per_pos"][i])
                     for e in self.engines for i in range(self.k)])
        return "\n".join(out) + "\n"


def make_handler(engine: Engine, ready: threading.Event):
    args = engine.args
    record_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Every event leaves at once, as from vLLM's server (asyncio sets TCP_NODELAY):
            # with Nagle's algorithm a small event waits for the client's delayed ACK
            # (40 ms), which both clients would then measure as the server's time.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *a: object) -> None:
            pass  # vLLM logs requests at INFO; the tests need a quiet log

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: object) -> None:
            self._send(status, json.dumps(obj).encode())

        def _healthy(self) -> bool:
            return ready.is_set() and not args.fake_never_healthy

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200 if self._healthy() else 503, b"", "text/plain")
            elif self.path == "/v1/models":
                if not self._healthy():
                    self._json(503, {"error": "starting"})
                    return
                self._json(200, {"object": "list", "data": [{
                    "id": name, "object": "model", "owned_by": "vllm",
                    "root": args.model, "max_model_len": args.max_model_len or 4096}
                    for name in engine.served_names]})
            elif self.path == "/metrics":
                self._send(200, engine.metrics().encode(), "text/plain; version=0.0.4")
            elif self.path == "/version":
                self._json(200, {"version": VERSION})
            else:
                self._json(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._json(400, {"error": {"message": "body is not JSON"}})
                return
            if args.fake_record:
                with record_lock, open(args.fake_record, "a") as fh:
                    # the CPUs this request's thread may run on: a benchmark that
                    # isolates CPUs must have pinned the server's threads
                    fh.write(json.dumps({"path": self.path, "body": body, "cpus": sorted(
                        os.sched_getaffinity(0))}) + "\n")
            if self.path == "/v1/chat/completions":
                # content as text parts ([{"type": "text", "text": ...}], as vllm bench
                # serve sends it) renders to the same prompt as the plain string
                messages = [{**m, "content": "".join(
                    part.get("text", "") for part in m["content"] if isinstance(part, dict))}
                    if isinstance(m, dict) and isinstance(m.get("content"), list) else m
                    for m in body.get("messages") or []]
                prompt = json.dumps(messages)
                chat = True
            elif self.path == "/v1/completions" and isinstance(body.get("prompt"), list) \
                    and body.get("logprobs"):
                self._json(200, _next_token_logprobs(body, args.fake_tie_margin))
                return
            elif self.path == "/v1/completions":
                prompt = str(body.get("prompt") or "")
                chat = False
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            if body.get("model") not in (None, *engine.served_names):
                self._json(404, {"error": {"message": f"The model `{body.get('model')}` "
                                                      "does not exist."}})
                return
            self._generate(body, prompt, chat)

        def _generate(self, body: dict, prompt: str, chat: bool) -> None:
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            key = hashlib.sha256(prompt.encode()).hexdigest()
            length, finish = max_tokens, "length"
            if args.fake_natural_len and not body.get("ignore_eos"):
                # the answer ends by itself (an end-of-turn token) at a length of its own
                length, finish = min(max_tokens, 1 + int(key[:8], 16) % max_tokens), "stop"
            e = engine.engines[int(key, 16) % len(engine.engines)]
            kwargs = body.get("chat_template_kwargs") or {}
            thinking = chat and bool(args.reasoning_parser) and \
                kwargs.get("enable_thinking", True) is not False
            think_tokens = max_tokens // 4 if thinking else 0
            prompt_tokens = len(prompt.split())
            model = body.get("model") or engine.served_name
            with engine.lock:
                engine.counters[e]["prompt"] += prompt_tokens
                engine.running += 1
                engine.started += 1
            pieces: list[tuple[str, str]] = []  # (field, text) per step
            n = 0
            try:
                stream = bool(body.get("stream"))
                if stream:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                diverge = args.fake_diverge_after
                for emitted in engine.steps(key, length, e):
                    ids = [(n + i) % 97 if diverge is None or n + i < diverge else
                           (n + i + 1) % 97 for i in range(emitted)]
                    words = [f"w{t}" for t in ids]
                    field = "reasoning_content" if n < think_tokens else "content"
                    text = "".join(" " + w for w in words)
                    first, n = n == 0, n + emitted
                    pieces.append((field, text))
                    if not stream:
                        continue
                    prompt_ids = [1000 + int(hashlib.sha256(w.encode()).hexdigest()[:4], 16)
                                  % 1000 for w in prompt.split()] if first and \
                        body.get("return_token_ids") else None
                    if first and chat:
                        # vLLM sends the role once the first step's output is there, in
                        # the same iteration as that output
                        self._event({"object": "chat.completion.chunk", "model": model,
                                     "choices": [{"index": 0, "delta": {
                                         "role": "assistant", "content": ""},
                                         "finish_reason": None}],
                                     **({"prompt_token_ids": prompt_ids} if prompt_ids
                                        else {})})
                    # the last text carries the finish reason, as vLLM sends it
                    done = finish if n >= length else None
                    if chat:
                        choice = {"index": 0, "delta": {field: text}, "finish_reason": done}
                    else:
                        choice = {"index": 0, "text": text, "finish_reason": done}
                    if body.get("return_token_ids"):
                        choice["token_ids"] = ids
                        if prompt_ids and not chat:
                            choice["prompt_token_ids"] = prompt_ids
                    self._event({"model": model, "choices": [choice]})
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                         "total_tokens": prompt_tokens + n}
                if stream:
                    if (body.get("stream_options") or {}).get("include_usage"):
                        self._event({"model": model, "choices": [], "usage": usage})
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                else:
                    content = "".join(t for f, t in pieces if f == "content")
                    reasoning = "".join(t for f, t in pieces if f != "content") or None
                    if chat:
                        choice = {"index": 0, "finish_reason": finish, "message": {
                            "role": "assistant", "content": content,
                            "reasoning_content": reasoning}}
                    else:
                        choice = {"index": 0, "finish_reason": finish, "text": content}
                    self._json(200, {"model": model, "choices": [choice], "usage": usage})
                with engine.lock:
                    engine.counters[e]["requests"] += 1
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (an interrupted benchmark): vLLM aborts too
            finally:
                with engine.lock:
                    engine.running -= 1

        def _event(self, obj: dict) -> None:
            self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def _next_token_logprobs(body: dict, margin: float) -> dict:
    """A one-token completion after a context of token ids, with the top logprobs as vLLM
    renders them for ``return_tokens_as_token_ids``: the plain token after ``n`` generated
    ids is ``n % 97``; a diverging server gives ``(n + 1) % 97`` there."""
    context = [int(x) for x in body["prompt"]]
    n = 0
    while n < len(context) and context[-1 - n] < 1000:
        n += 1
    plain, other = n % 97, (n + 1) % 97
    top = {f"token_id:{plain}": -0.02, f"token_id:{other}": -0.02 - margin}
    for extra in range(2, int(body.get("logprobs") or 2)):
        top.setdefault(f"token_id:{(n + extra) % 97}", -12.0 - extra)
    return {"object": "text_completion", "model": body.get("model"), "choices": [{
        "index": 0, "text": f" w{plain}", "finish_reason": "length",
        "logprobs": {"tokens": [f"token_id:{plain}"], "token_logprobs": [-0.02],
                     "top_logprobs": [top], "text_offset": [0]}}],
        "usage": {"prompt_tokens": len(context), "completion_tokens": 1,
                  "total_tokens": len(context) + 1}}


def _tensors(path: Path) -> tuple[dict, int]:
    """A safetensors file's header and where its data starts."""
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
    return header, 8 + size


_FORMATS = {"F32": ("f", 4), "F16": ("e", 2), "BF16": ("H", 2), "I64": ("q", 8),
            "I32": ("i", 4)}


def _read(path: Path, header: dict, base: int, name: str, start: int, count: int) -> list:
    """``count`` elements of tensor ``name`` from element ``start``, as Python numbers."""
    info = header[name]
    code, size = _FORMATS[info["dtype"]]
    with open(path, "rb") as fh:
        fh.seek(base + info["data_offsets"][0] + start * size)
        raw = fh.read(count * size)
    values = list(struct.unpack(f"<{count}{code}", raw))
    if info["dtype"] == "BF16":  # the high half of a float32
        values = [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in values]
    return values


def head_alignment(draft: Path, target: Path, sample: int = 64) -> float | None:
    """The share of the drafter's lm_head rows ``i`` (sampled) that equal the target's row
    for token ``i + d2t[i]`` (cosine >= 0.9), as an EAGLE-3 head initialised from the
    target's has them; a head whose rows were permuted against d2t (a stale warm start)
    scores wrong tokens. None when the files cannot tell: no such tensors, or rows of
    zeros (the placeholder models of the serving tests)."""
    try:
        dh, db = _tensors(draft / "model.safetensors")
        th, tb = _tensors(target / "model.safetensors")
    except (OSError, ValueError):
        return None
    head = "lm_head.weight" if "lm_head.weight" in th else "model.embed_tokens.weight"
    if "lm_head.weight" not in dh or "d2t" not in dh or head not in th:
        return None
    rows, hidden = dh["lm_head.weight"]["shape"]
    if th[head]["shape"][1] != hidden or dh["d2t"]["shape"] != [rows]:
        return None
    matched = judged = 0
    try:
        d2t = _read(draft / "model.safetensors", dh, db, "d2t", 0, rows)
        for i in range(0, rows, max(1, rows // sample)):
            a = _read(draft / "model.safetensors", dh, db, "lm_head.weight", i * hidden, hidden)
            b = _read(target / "model.safetensors", th, tb, head, (i + d2t[i]) * hidden,
                      hidden)
            na, nb = sum(x * x for x in a) ** 0.5, sum(x * x for x in b) ** 0.5
            if na and nb:
                judged += 1
                matched += sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb) >= 0.9
    except (KeyError, struct.error, OSError):
        return None
    return matched / judged if judged else None


def target_architectures(model: str) -> list[str]:
    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return []
    return [str(a) for a in cfg.get("architectures") or []]


def target_model_type(model: str) -> str:
    """What vLLM checks: the text config's model_type (``text_config`` for multimodal)."""
    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return ""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    return str(text.get("model_type") or cfg.get("model_type") or "")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.fake_ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log("INFO", "api_server.py:1", f"vLLM API server version {VERSION}")
    log("INFO", "utils.py:1", f"non-default args: model={args.model!r}, port={args.port}, "
                              f"speculative_config={args.speculative_config}, "
                              f"kv_cache_memory_bytes={args.kv_cache_memory_bytes}")
    if args.fake_v1_runner and (args.speculative_config or {}).get(
            "num_speculative_tokens_per_batch_size"):
        log("WARNING", "vllm.py:829", "Dynamic speculative decoding changes the target "
            "verification length at runtime. Overriding cudagraph_mode from "
            "FULL_AND_PIECEWISE to PIECEWISE for reliability. Use VLLM_USE_V2_MODEL_RUNNER=1 "
            "if you want to use full CUDA graphs.")
    spec = args.speculative_config or {}
    if spec and args.fake_eagle3_types and spec.get("method") == "eagle3":
        allowed = [t.strip() for t in args.fake_eagle3_types.split(",") if t.strip()]
        mt = target_model_type(args.model)
        if not any(t in mt for t in allowed):
            print("Traceback (most recent call last):", flush=True)
            print('  File "vllm/engine/arg_utils.py", line 1, in create_speculative_config',
                  flush=True)
            print("pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                  "SpeculativeConfig", flush=True)
            print(f"  Value error, Eagle3 is only supported for {allowed} models. Got "
                  f"self.target_model_config.hf_text_config.model_type='{mt}' "
                  "[type=value_error, input_value=ArgsKwargs((), {'method': 'eagle3'}), "
                  "input_type=ArgsKwargs]", flush=True)
            return 1
    if spec and args.fake_no_eagle3_interface and spec.get("method") == "eagle3":
        lacking = {a.strip() for a in args.fake_no_eagle3_interface.split(",") if a.strip()}
        if lacking & set(target_architectures(args.model)):
            log("INFO", "gpu_model_runner.py:1", f"Starting to load model {args.model}...")
            print("(EngineCore_DP0) ERROR [core.py:712] EngineCore failed to start.",
                  flush=True)
            print("Traceback (most recent call last):", flush=True)
            print('  File "vllm/v1/worker/gpu_model_runner.py", line 5174, in load_model',
                  flush=True)
            print("RuntimeError: Model does not support EAGLE3 interface but "
                  "aux_hidden_state_outputs was requested", flush=True)
            print("RuntimeError: Engine core initialization failed. See root cause above. "
                  "Failed core proc(s): {}", flush=True)
            return 1
    if args.fake_engine_child:
        # named so tests can find it: the engine process of the server on this port
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)",
                                  "fake-engine-core", f"--port={args.port}"])
        log("INFO", "core.py:1", f"EngineCore_DP0 pid={child.pid} started")
    if args.fake_die_in_capture and spec.get("num_speculative_tokens_per_batch_size"):
        time.sleep(0.3)
        log("INFO", "speculator.py:95", "Capturing prefill CUDA graphs")
        log("INFO", "speculator.py:113", "Capturing decode CUDA graphs")
        print("(EngineCore_DP0) ERROR [core.py:1163] EngineCore failed to start.", flush=True)
        print("Traceback (most recent call last):", flush=True)
        for where in ('vllm/v1/worker/gpu/cudagraph_utils.py", line 330, in capture',
                      'vllm/v1/worker/gpu/spec_decode/autoregressive/cudagraph_utils.py", '
                      'line 47, in forward_fn',
                      'vllm/v1/worker/gpu/input_batch.py", line 109, in make_dummy'):
            print(f'  File "{where}', flush=True)
        print("    assert 0 < num_reqs <= num_tokens", flush=True)
        print("AssertionError", flush=True)
        print("RuntimeError: Engine core initialization failed. See root cause above. "
              "Failed core proc(s): {}", flush=True)
        return 1
    if args.fake_die_after is not None:
        time.sleep(args.fake_die_after)
        print("(EngineCore_DP0) ERROR [core.py:712] EngineCore failed to start.", flush=True)
        print("Traceback (most recent call last):", flush=True)
        print('  File "vllm/v1/engine/core.py", line 703, in run_engine_core', flush=True)
        print(args.fake_die_message, flush=True)
        print("RuntimeError: Engine core initialization failed. See root cause above. "
              "Failed core proc(s): {}", flush=True)
        return 1
    engine = Engine(args)
    ready = threading.Event()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(engine, ready))
    server.daemon_threads = True
    log("INFO", "api_server.py:2", f"Starting vLLM API server 0 on http://{args.host}:"
                                   f"{args.port}")

    def stop(signum: int, frame: object) -> None:
        log("INFO", "launcher.py:1", "Shutting down FastAPI HTTP server.")
        threading.Thread(target=server.shutdown, daemon=True).start()

    if not args.fake_ignore_term:
        signal.signal(signal.SIGTERM, stop)

    def warm_up() -> None:
        time.sleep(args.fake_startup_s)
        ready.set()
        log("INFO", "launcher.py:2", "Application startup complete.")

    threading.Thread(target=warm_up, daemon=True).start()
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
