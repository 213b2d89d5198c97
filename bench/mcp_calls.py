"""What does an agent pay per todo call, by each way in?

Same work each time: a 30-item list in the opencode shape with one status changed. Measured
in one run, on one fresh store:

* in-process: ``harness.agents.tools.call`` (parse, merge, one event, commit) - the
  baseline, no transport;
* MCP: ``todowrite`` and ``todoread`` through a real ``harness mcp`` subprocess and the
  SDK's own stdio client, plus an MCP ``ping`` (the transport alone);
* a process per call, as hooks and the CLI do it: ``harness hook claude-code`` with a
  PostToolUse TodoWrite payload, and ``harness todowrite``.

    python bench/mcp_calls.py                   # 1000 MCP calls, 20 processes
    python bench/mcp_calls.py --calls 300 --spawns 10

Prints one table: median and p90 per call, and the ratio to the in-process baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from harness.agents.tools import ToolEnv, call  # noqa: E402
from harness.context import Harness  # noqa: E402
from state.store import Store  # noqa: E402

ITEMS = 30


def opencode(k: int) -> dict:
    return {"todos": [{"content": f"Step {i}: do the thing number {i} on the GPU host",
                       "status": "in_progress" if i == k % ITEMS else "pending",
                       "priority": "medium"} for i in range(ITEMS)]}


def claude(k: int) -> dict:
    return {"todos": [{"content": f"Claude step {i}", "activeForm": f"Doing claude step {i}",
                       "status": "in_progress" if i == k % ITEMS else "pending"}
                      for i in range(ITEMS)]}


def in_process(db: Path, n: int) -> list[float]:
    h = Harness(db=str(db), session="inproc")
    h.session(create=True)
    env = ToolEnv(h, "agent:bench")
    times = []
    for k in range(n):
        t0 = time.perf_counter()
        call(env, "todowrite", {**opencode(k), "session": "inproc"})
        times.append(time.perf_counter() - t0)
    h.close()
    return times


async def over_mcp(db: Path, n: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db),
           "HARNESS_SESSION": "mcp"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "harness", "mcp"],
                                   env=env)
    out: dict[str, list[float]] = {"write": [], "read": [], "ping": []}
    async with stdio_client(params) as (r, w), ClientSession(
            r, w, client_info=types.Implementation(name="bench", version="1")) as s:
        await s.initialize()
        await s.call_tool("todowrite", opencode(-1))
        for k in range(n):
            t0 = time.perf_counter()
            res = await s.call_tool("todowrite", opencode(k))
            out["write"].append(time.perf_counter() - t0)
            assert not res.is_error, res.content[0].text
            t0 = time.perf_counter()
            await s.call_tool("todoread", {"format": "json"})
            out["read"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await s.send_ping()
            out["ping"].append(time.perf_counter() - t0)
    return out


def per_process(db: Path, n: int, args: list[str], body) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db),
           "HARNESS_SESSION": "spawn-" + args[0]}
    times = []
    for k in range(n):
        stdin = json.dumps(body(k)).encode()
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "harness", *args], input=stdin, env=env,
                           capture_output=True)
        times.append(time.perf_counter() - t0)
        assert r.returncode == 0, r.stderr
    return times


def hook_payload(k: int) -> dict:
    return {"session_id": "bench", "transcript_path": "/tmp/x.jsonl", "cwd": "/tmp",
            "hook_event_name": "PostToolUse", "tool_name": "TodoWrite",
            "tool_input": claude(k), "tool_response": {}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--spawns", type=int, default=20)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        os.environ["HARNESS_DATA_DIR"] = str(Path(tmp) / "data")
        os.environ["HARNESS_CONFIG_DIR"] = str(Path(tmp) / "config")
        with Store.open(str(db)) as store:
            for name in ("mcp", "spawn-hook", "spawn-todowrite"):
                store.create_session(name, actor="bench")
        base = in_process(db, a.calls)
        mcp = anyio.run(over_mcp, db, a.calls)
        hook = per_process(db, a.spawns, ["hook", "claude-code"], hook_payload)
        cli = per_process(db, a.spawns, ["todowrite"], opencode)
    rows = [("in-process agents.tools todowrite (baseline)", base),
            ("MCP todowrite (stdio, SDK client)", mcp["write"]),
            ("MCP todoread json", mcp["read"]),
            ("MCP ping (transport only)", mcp["ping"]),
            ("hook claude-code TodoWrite (a process per call)", hook),
            ("CLI harness todowrite (a process per call)", cli)]
    ref = statistics.median(base)
    print(f"{'path':<50} {'n':>5} {'median ms':>10} {'p90 ms':>9} {'x base':>8}")
    for name, xs in rows:
        med = statistics.median(xs)
        p90 = sorted(xs)[int(len(xs) * 0.9) - 1]
        print(f"{name:<50} {len(xs):>5} {med * 1e3:>10.2f} {p90 * 1e3:>9.2f} {med / ref:>8.1f}")


if __name__ == "__main__":
    main()
