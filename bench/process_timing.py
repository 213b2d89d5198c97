"""What the whole-process latency benchmarks share (cli_latency.py for people's commands,
agent_latency.py for an agent's): the `harness` they start, the todowrite payloads, one
timed run of a fresh process, and the rows of the table against the baseline."""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def harness_exe() -> list[str]:
    """The console script people and agents run (`harness`), beside this interpreter."""
    script = Path(sys.executable).with_name("harness")
    return [str(script)] if script.exists() else [sys.executable, "-m", "harness"]


def todowrite_payloads() -> list[bytes]:
    """Two lists of 30 that differ in one status, so that alternating them really writes."""
    out = []
    for flip in ("in_progress", "completed"):
        todos = [{"content": f"Step {i}: measure acceptance on prompt set {i}",
                  "status": "completed" if i < 10 else (flip if i == 10 else "pending"),
                  "priority": "medium"} for i in range(30)]
        out.append(json.dumps({"todos": todos}).encode())
    return out


def timed_run(argv: list[str], stdin: bytes,
              env: dict[str, str]) -> tuple[subprocess.CompletedProcess[bytes], float, float]:
    """Run ``argv`` once: its result, wall seconds, and CPU seconds (user + system)."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, input=stdin, env=env, capture_output=True)
    dt = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, dt, c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime


def latency_rows(times: dict[str, list[float]],
                 cpu: dict[str, list[float]] | None = None) -> list[dict[str, object]]:
    """One row a case, in ``times``' order; its first case is the baseline."""
    base = statistics.median(next(iter(times.values())))
    rows = []
    for name, runs in times.items():
        med = statistics.median(runs)
        row: dict[str, object] = {
            "case": name, "median_ms": round(med * 1000, 1),
            "p90_ms": round(statistics.quantiles(runs, n=10)[-1] * 1000, 1)
            if len(runs) >= 10 else None,
            "ratio": round(med / base, 2)}
        if cpu is not None:
            row["cpu_ms"] = round(statistics.median(cpu[name]) * 1000, 1)
        row["runs"] = len(runs)
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, object]]) -> None:
    """The rows of :func:`latency_rows`, with the CPU column where they have one."""
    with_cpu = any("cpu_ms" in r for r in rows)
    width = max(len(str(r["case"])) for r in rows)
    print(f"{'case':<{width}}  {'median ms':>9}  {'p90 ms':>7}  {'x baseline':>10}"
          + (f"  {'cpu ms':>6}" if with_cpu else ""))
    for r in rows:
        p90 = f"{r['p90_ms']:>7}" if r["p90_ms"] is not None else f"{'':>7}"
        print(f"{r['case']:<{width}}  {r['median_ms']:>9}  {p90}  {r['ratio']:>10}"
              + (f"  {r['cpu_ms']:>6}" if with_cpu else ""))


def hook_rows(results: dict[str, dict[str, list[float]]]) -> list[dict[str, object]]:
    """The hook benchmarks' rows (claude_hook_latency.py, gemini_hook_latency.py): per hook,
    the median ms of ``results["harness"]`` against ``results["baseline"]`` (the same hooks
    as ``cat``), then every hook together; with ``results["before"]`` (the hooks of an
    earlier revision), its median too."""
    before = results.get("before")
    rows: list[dict[str, object]] = []
    for name in sorted(set(results["harness"]) | set(results["baseline"])):
        ours = results["harness"].get(name, [])
        base = results["baseline"].get(name, [])
        if not ours or not base:
            continue
        mo, mb = statistics.median(ours), statistics.median(base)
        row: dict[str, object] = {"hook": name, "n": len(ours), "harness_ms": round(mo, 1),
                                  "baseline_ms": round(mb, 1),
                                  "ratio": round(mo / mb, 2) if mb else None}
        if before and before.get(name):
            row["before_ms"] = round(statistics.median(before[name]), 1)
        rows.append(row)
    every = [x for v in results["harness"].values() for x in v]
    every_base = [x for v in results["baseline"].values() for x in v]
    total: dict[str, object] = {
        "hook": "all hooks", "n": len(every), "harness_ms": round(statistics.median(every), 1),
        "baseline_ms": round(statistics.median(every_base), 1),
        "ratio": round(statistics.median(every) / statistics.median(every_base), 2)}
    if before:
        total["before_ms"] = round(statistics.median([x for v in before.values() for x in v]), 1)
    rows.append(total)
    return rows


def print_hook_table(title: str, rows: list[dict[str, object]]) -> None:
    print(title)
    width = max(28, *(len(str(r["hook"])) for r in rows))
    before = any("before_ms" in r for r in rows)
    print(f"{'hook':{width}} {'n':>4} {'harness':>9} {'baseline':>9} {'ratio':>6}"
          + (f" {'before':>9}" if before else ""))
    for r in rows:
        print(f"{r['hook']!s:{width}} {r['n']:>4} {r['harness_ms']:>9} {r['baseline_ms']:>9} "
              f"{r['ratio']!s:>6}" + (f" {r.get('before_ms', '')!s:>9}" if before else ""))
