"""One server at one concurrency: the requests in flight, their timings, and the summary.

:func:`run_level` sends streaming requests (OpenAI chat or completions,
:mod:`pipeline.vllm.openai_client`), ``level.concurrency`` at a time, cycling the prompt
set, each worker on one kept-alive connection, and records each one's timing into its
:class:`Level`; :meth:`Level.summary` gives
throughput and TTFT/TPOT/ITL/latency percentiles. A level measures something only when it
lasts: it sends at least ``level.requests`` requests and keeps sending until
``min_seconds`` have passed, then finishes the pass over the prompt set it is in, so every
server at a level answers each prompt equally often. :mod:`pipeline.eagle3.benchmark` runs a level per
server, concurrency and trial. Standard library only.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pipeline.vllm.metrics import SpecDelta
from pipeline.vllm.openai_client import Connections, StreamTiming, stream_request

__all__ = ["Interrupted", "Level", "percentiles", "run_level"]


def percentiles(values: list[float]) -> dict[str, float | None]:
    """mean, p50, p90, p99 (linear interpolation, as numpy's default)."""
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    xs = sorted(values)

    def pct(q: float) -> float:
        pos = (len(xs) - 1) * q
        lo, hi = math.floor(pos), math.ceil(pos)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {"mean": sum(xs) / len(xs), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99)}


@dataclass
class Level:
    """One server at one concurrency."""

    role: str
    url: str
    concurrency: int
    requests: int
    records: list[tuple[int, StreamTiming]] = field(default_factory=list)
    duration: float = 0.0
    spec: SpecDelta | None = None
    interrupted: bool = False
    trial: int = 1
    host_busy: float | None = None  # share of the host's CPU time busy during the run

    @property
    def ok(self) -> list[StreamTiming]:
        return [r for _, r in self.records if r.ok]

    @property
    def failed(self) -> list[StreamTiming]:
        return [r for _, r in self.records if not r.ok]

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.ok)

    @property
    def throughput(self) -> float | None:
        return self.output_tokens / self.duration if self.duration > 0 and self.ok else None

    def summary(self) -> dict[str, Any]:
        ms = lambda xs: {k: (None if v is None else round(v * 1000, 3))  # noqa: E731
                         for k, v in percentiles(xs).items()}
        ok = self.ok
        errors = list(dict.fromkeys(r.error or "?" for r in self.failed))[:3]
        return {
            "role": self.role, "url": self.url, "concurrency": self.concurrency,
            "trial": self.trial, "requests": len(self.records), "completed": len(ok),
            "failed": len(self.failed),
            "interrupted": self.interrupted, "errors": errors,
            "host_busy": None if self.host_busy is None else round(self.host_busy, 4),
            "duration_s": round(self.duration, 4), "output_tokens": self.output_tokens,
            "output_throughput": None if self.throughput is None else round(self.throughput, 3),
            "request_throughput": round(len(ok) / self.duration, 4) if self.duration > 0
            else None,
            "usage_reported": all(r.usage_reported for r in ok) if ok else None,
            "ttft_ms": ms([r.ttft for r in ok if r.ttft is not None]),
            "tpot_ms": ms([r.tpot for r in ok if r.tpot is not None]),
            "itl_ms": ms([gap for r in ok for gap in r.itl]),
            "latency_ms": ms([r.latency for r in ok if r.latency is not None]),
            "spec_decode": self.spec.to_json() if self.spec is not None else None,
        }


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of every CPU of the host since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _busy_between(before: tuple[int, int] | None, after: tuple[int, int] | None
                  ) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


class Interrupted(Exception):
    def __init__(self, level: Level):
        super().__init__("interrupted")
        self.level = level


def run_level(level: Level, bodies: list[tuple[str, dict[str, Any]]], *, timeout: float,
              api_key: str | None, min_seconds: float = 0.0) -> None:
    """At least ``level.requests`` requests, ``level.concurrency`` at a time, prompts in
    order and cycled; with ``min_seconds``, more until that long has passed and the pass
    over the prompts is whole (no request starts after that; those in flight finish).

    Worker threads do the HTTP; the main thread only waits, in short slices, so a signal
    (SIGTERM, Ctrl-C) reaches it at once. Then no new request starts, and the level keeps
    what finished; requests in flight are abandoned (daemon threads).
    """
    lock = threading.Lock()
    next_index = [0]
    stop = threading.Event()

    def wanted(i: int) -> bool:
        if i < level.requests:
            return True
        if min_seconds <= 0:
            return False
        return time.perf_counter() - started < min_seconds or i % len(bodies) != 0

    def worker() -> None:
        kept = Connections()  # one connection a worker, kept, as vllm bench serve keeps them
        try:
            while not stop.is_set():
                with lock:
                    i = next_index[0]
                    if not wanted(i):
                        return
                    next_index[0] += 1
                path, body = bodies[i % len(bodies)]
                timing = stream_request(level.url, path, body, timeout=timeout,
                                        api_key=api_key, connections=kept)
                with lock:
                    level.records.append((i, timing))
        finally:
            kept.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(
        level.concurrency if min_seconds > 0 else min(level.concurrency, level.requests))]
    cpu = _cpu_times()  # a slow run on a busy host says so in its summary
    started = time.perf_counter()
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    except KeyboardInterrupt:
        stop.set()
        level.duration = time.perf_counter() - started
        level.interrupted = True
        level.host_busy = _busy_between(cpu, _cpu_times())
        raise Interrupted(level) from None
    level.duration = time.perf_counter() - started
    level.host_busy = _busy_between(cpu, _cpu_times())
