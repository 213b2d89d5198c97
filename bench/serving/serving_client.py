"""How much does the benchmark client itself cost, next to what it measures?

The serving benchmark (pipeline/eagle3/benchmark.py) times vLLM through
``pipeline.vllm.openai_client.stream_request``: it parses every SSE line and JSON chunk and
stamps the first token. Against the fake vLLM server with no decode delay
(``--fake-step-ms 0``), so that only server and client work remain, this compares in the
same run:

- streaming requests through the harness client, against a raw ``http.client`` request
  that reads the same chunked stream without parsing it (the transport floor);
- the same at concurrency 8 (worker threads, as the benchmark runs them);
- parsing a ``/metrics`` page of 4 engines x 7 draft positions with the harness parser
  (``spec_snapshot``), against a bare regex pass over the lines.

    python -m bench.serving.serving_client              # 256 tokens a request, 200 requests
    python -m bench.serving.serving_client --tokens 64 --requests 100

Prints one table: medians, and the harness figure over the baseline's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipeline.vllm.metrics import spec_snapshot
from pipeline.vllm.openai_client import get, stream_request

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, *extra: str) -> subprocess.Popen:
    spec = json.dumps({"method": "eagle3", "model": "d", "num_speculative_tokens": 7})
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_vllm.py"), "serve",
                             "bench", "--port", str(port), "--host", "127.0.0.1",
                             "--fake-step-ms", "0", "--fake-startup-s", "0",
                             "--speculative-config", spec, *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 30
    while not get(f"{url}/health", timeout=1).ok:
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit("the fake server did not start")
        time.sleep(0.05)
    return proc


def raw_request(port: int, body: dict) -> float:
    payload = json.dumps({**body, "stream": True,
                          "stream_options": {"include_usage": True}}).encode()
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", body=payload,
                 headers={"Content-Type": "application/json"})
    conn.getresponse().read()
    conn.close()
    return time.perf_counter() - started


def harness_request(port: int, body: dict) -> float:
    started = time.perf_counter()
    t = stream_request(f"http://127.0.0.1:{port}", "/v1/completions", body, timeout=60)
    if not t.ok:
        raise SystemExit(f"request failed: {t.error}")
    return time.perf_counter() - started


def concurrent(fn, port: int, body: dict, n: int, c: int) -> float:
    """Wall seconds for ``n`` requests, ``c`` at a time."""
    lock, left = threading.Lock(), [n]

    def worker() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            fn(port, body)

    threads = [threading.Thread(target=worker) for _ in range(c)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def metrics_page(engines: int = 4, k: int = 7) -> str:
    lines = []
    for name in ("drafts", "draft_tokens", "accepted_tokens"):
        lines.append(f"# TYPE vllm:spec_decode_num_{name}_total counter")
        for e in range(engines):
            lines.append(f'vllm:spec_decode_num_{name}_total{{engine="{e}",model_name="m"}} '
                         f"{1234.0 * (e + 1)}")
            lines.append(f'vllm:spec_decode_num_{name}_created{{engine="{e}",model_name="m"}}'
                         " 1.7e9")
    for e in range(engines):
        for p in range(k):
            lines.append('vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="'
                         f'{e}",model_name="m",position="{p}"}} {100.0 * (k - p)}')
    # the rest of a real page: histograms with many buckets per engine
    for e in range(engines):
        for metric in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                       "e2e_request_latency_seconds", "request_prefill_time_seconds"):
            for le in [0.001 * 2**i for i in range(20)] + ["+Inf"]:
                lines.append(f'vllm:{metric}_bucket{{engine="{e}",le="{le}",'
                             f'model_name="m"}} 17.0')
    return "\n".join(lines) + "\n"


BARE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def bare_parse(text: str) -> int:
    found = 0
    for line in text.splitlines():
        if line and line[0] != "#" and BARE.match(line):
            found += 1
    return found


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    port = free_port()
    server = start_server(port, "--fake-acceptance", "0,0,0,0,0,0,0")
    body = {"model": "bench", "prompt": "hello", "max_tokens": args.tokens}
    rows = []
    try:
        for fn in (raw_request, harness_request):  # warm both paths
            for _ in range(5):
                fn(port, body)
        raw, ours = [], []
        for _ in range(args.requests):  # interleaved, so drift hits both alike
            raw.append(raw_request(port, body))
            ours.append(harness_request(port, body))
        r, o = statistics.median(raw), statistics.median(ours)
        rows.append((f"1 request, {args.tokens} tokens (ms)", r * 1e3, o * 1e3))
        # the median of paired differences: robust to the host's load drifting
        diff = statistics.median(b - a for a, b in zip(raw, ours, strict=True))
        rows.append(("client cost per token (us)", None, diff / args.tokens * 1e6))
        n = max(8, args.requests // 5)
        r8, o8 = [], []
        for _ in range(5):  # alternating rounds
            r8.append(n * args.tokens / concurrent(raw_request, port, body, n, 8))
            o8.append(n * args.tokens / concurrent(harness_request, port, body, n, 8))
        rows.append((f"{n} requests at concurrency 8 (tok/s)", statistics.median(r8),
                     statistics.median(o8)))
    finally:
        server.terminate()
        server.wait(10)
    page = metrics_page()
    snap = spec_snapshot(page)
    assert snap.present and snap.engines == ("0", "1", "2", "3")
    b = timed(lambda: bare_parse(page), 200)
    h = timed(lambda: spec_snapshot(page), 200)
    rows.append((f"parse /metrics, {len(page) // 1024} KiB, {len(page.splitlines())} lines (ms)",
                 b * 1e3, h * 1e3))
    print(f"{'measurement':<48} {'baseline':>10} {'harness':>10} {'ratio':>7}")
    for name, base, mine in rows:
        ratio = f"{mine / base:.2f}" if base else "-"
        base_s = f"{base:.3f}" if base is not None else "-"
        print(f"{name:<48} {base_s:>10} {mine:>10.3f} {ratio:>7}")


if __name__ == "__main__":
    main()
