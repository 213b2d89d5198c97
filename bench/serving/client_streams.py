"""What reading many streams at once costs the benchmark's client, per stream event.

On the H100 at 64 requests in flight, our client read 9-15% fewer tokens/s than ``vllm
bench serve`` on the same servers, and its ITL p50 on plain decoding was 8.1 ms against
4.9 (docs/PERFORMANCE.md, "Every level within ±5%"): one Python process with a thread per
request falling behind 64 streams of one token a chunk. This measures the client alone: a
server process that writes pre-rendered SSE streams as vLLM's does (one HTTP chunk per
``data:`` event, chunked transfer), as fast as the socket takes them, and the client
reading them ``--concurrency`` at a time in threads, as ``run_level`` does. Per client it
reports the client process's CPU time per event (every thread's; the server is another
process), the events per second it read, the ITL p50 it measured (against the server's
pace, ``--gap-ms``) and the connections the server accepted in a round (the server keeps
a connection open for the next request, as uvicorn does).

The baseline in the same run is ``stream_request`` as committed at ``--baseline`` (default
HEAD), loaded from git into a module of its own; the candidate is the working tree's.

    python -m bench.serving.client_streams                      # 64 streams, 2,000 requests
    python -m bench.serving.client_streams --baseline HEAD~1 --rounds 5
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
CLIENT = "pipeline/vllm/openai_client.py"

SERVER = r'''
import json, socket, sys, threading, time
events, port_file, gap = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]) / 1000

def chunk(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"

parts = []
for i in range(events):
    ev = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
          "model": "m", "choices": [{"index": 0, "delta": {"content": " tok"},
                                     "token_ids": [100 + i % 50], "logprobs": None,
                                     "finish_reason": "stop" if i == events - 1 else None}]}
    parts.append(chunk(b"data: " + json.dumps(ev).encode() + b"\n\n"))
usage = {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9,
         "completion_tokens": events, "total_tokens": events + 9}}
parts.append(chunk(b"data: " + json.dumps(usage).encode() + b"\n\n"))
parts.append(chunk(b"data: [DONE]\n\n"))
parts.append(b"0\r\n\r\n")
head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\n\r\n")

accepted = [0]

def serve(conn):
    try:
        answer(conn)
    except OSError:  # a client that closes without reading the body's end resets it
        pass

def answer(conn):
    # HTTP/1.1: answers on one connection until the client closes it
    with conn:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                got = conn.recv(65536)
                if not got:
                    return
                buf += got
            head_end = buf.index(b"\r\n\r\n") + 4
            length = int([l.split(b":")[1] for l in buf[:head_end].split(b"\r\n")
                          if l.lower().startswith(b"content-length")][0])
            while len(buf) < head_end + length:
                buf += conn.recv(65536)
            buf = buf[head_end + length:]
            conn.sendall(head)
            due = time.perf_counter()
            for p in parts:  # one send a chunk, as a streaming server flushes each event
                if gap:  # a decode step's pace: each event alone on the wire
                    due += gap
                    time.sleep(max(0.0, due - time.perf_counter()))
                conn.sendall(p)

srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(512)
open(port_file, "w").write(str(srv.getsockname()[1]))
while True:
    c, _ = srv.accept()
    accepted[0] += 1
    open(port_file + ".conns", "w").write(str(accepted[0]))
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def _baseline_module(ref: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{ref}:{CLIENT}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "openai_client_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("openai_client_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _read_all(stream, url: str, requests: int, concurrency: int, pool=None
              ) -> tuple[float, float, int, float]:
    """(client CPU seconds, wall seconds, events, ITL p50 ms) for ``requests`` streams,
    ``concurrency`` threads taking the next request until none are left."""
    left = [requests]
    lock = threading.Lock()
    events = [0]
    gaps: list[float] = []
    failed: list[str] = []

    def worker() -> None:
        extra = {"connections": pool()} if pool is not None else {}  # a worker's own
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            t = stream(url, "/v1/chat/completions", {"model": "m", "messages": []}, **extra)
            with lock:
                events[0] += t.chunks
                gaps.extend(t.itl)
                if not t.ok:
                    failed.append(t.error or "?")

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    cpu, wall = time.process_time(), time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failed:
        raise SystemExit(f"{len(failed)} streams failed: {failed[0]}")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, events[0], statistics.median(gaps) * 1000 if gaps else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default="HEAD", help="git ref of the baseline client")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--events", type=int, default=40, help="events a stream (tokens, plain)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gap-ms", type=float, default=0.0,
                   help="the server's pause before each event (a decode step); 0: as fast "
                        "as the socket takes them")
    args = p.parse_args(argv)

    from pipeline.vllm import openai_client
    baseline = _baseline_module(args.baseline)
    clients = {"baseline": (baseline.stream_request, getattr(baseline, "Connections", None)),
               "candidate": (openai_client.stream_request,
                             getattr(openai_client, "Connections", None))}
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.events),
                                   str(port_file), str(args.gap_ms)])
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.05)
            url = f"http://127.0.0.1:{int(port_file.read_text())}"
            conns = Path(str(port_file) + ".conns")
            results: dict[str, list[tuple[float, float, float]]] = {n: [] for n in clients}
            opened: dict[str, int] = {}
            for r in range(args.rounds):
                order = list(clients) if r % 2 == 0 else list(clients)[::-1]  # ABBA
                for name in order:
                    before = int(conns.read_text()) if conns.exists() else 0
                    cpu, wall, n, itl = _read_all(*clients[name][:1], url, args.requests,
                                                  args.concurrency, clients[name][1])
                    opened[name] = int(conns.read_text()) - before
                    results[name].append((cpu / n * 1e6, n / wall, itl))
        finally:
            server.kill()
            server.wait()
    print(f"{args.requests} streams of {args.events} events, {args.concurrency} at a time, "
          f"{args.rounds} rounds in ABBA order, the server pausing {args.gap_ms:g} ms "
          f"before each event (median; baseline: {args.baseline}):")
    base_cpu = statistics.median(x for x, _, _ in results["baseline"])
    base_rate = statistics.median(y for _, y, _ in results["baseline"])
    for name, rows in results.items():
        cpu = statistics.median(x for x, _, _ in rows)
        rate = statistics.median(y for _, y, _ in rows)
        itl = statistics.median(z for _, _, z in rows)
        print(f"  {name:9s}  client CPU {cpu:6.1f} us/event ({cpu / base_cpu:.2f}x)   "
              f"{rate:9,.0f} events/s ({rate / base_rate:.2f}x)   ITL p50 {itl:.2f} ms   "
              f"{opened[name]} connections   rounds: "
              + ", ".join(f"{x:.1f}" for x, _, _ in rows))
    print(json.dumps({n: rows for n, rows in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
