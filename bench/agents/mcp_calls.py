"""What does an agent pay per todo call, by each way in?

Same work each time: a 30-item list in the opencode shape with one status changed. Measured
in one run, on one fresh store:

* in-process: ``harness.agents.tools.call`` (parse, merge, one event, commit) - the
  baseline, no transport;
* MCP: ``todowrite`` and ``todoread`` through a real ``harness mcp`` subprocess and the
  SDK's own stdio client, plus an MCP ``ping`` (the transport alone);
* a process per call, as hooks and the CLI do it: ``harness hook claude-code`` with a
  PostToolUse TodoWrite payload, and ``harness todowrite``.

    python -m bench.agents.mcp_calls                   # 1000 MCP calls, 20 processes
    python -m bench.agents.mcp_calls --calls 300 --spawns 10
    python -m bench.agents.mcp_calls --before main     # and the same with the code of `main`

Every MCP call is the agent's heartbeat (issue 35): ``holding a lease`` repeats the MCP
rows with a server whose agent holds a leased claim, which each call renews. ``--before
REF`` adds the MCP and per-process rows run by the code of git revision REF (its own
store), the MCP calls interleaved call by call with the others.

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
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

from harness.agents.tools import ToolEnv, call
from harness.context import Harness
from state.store import Store

ROOT = Path(__file__).resolve().parents[2]

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


async def over_mcp(servers: list[tuple[str, dict[str, str], Path]],
                   n: int) -> dict[str, dict[str, list[float]]]:
    """Each server (label, environment, working directory) answers the same calls, taken
    in turn call by call, so a burst of load on a shared machine falls on all alike."""
    from contextlib import AsyncExitStack

    out: dict[str, dict[str, list[float]]] = {}
    async with AsyncExitStack() as stack:
        sessions = []
        for tag, env, cwd in servers:
            params = StdioServerParameters(command=sys.executable, args=["-m", "harness", "mcp"],
                                           env=env, cwd=str(cwd))
            r, w = await stack.enter_async_context(stdio_client(params))
            s = await stack.enter_async_context(ClientSession(
                r, w, client_info=types.Implementation(name="bench", version="1")))
            await s.initialize()
            await s.call_tool("todowrite", opencode(-1))
            sessions.append((tag, s))
            out[tag] = {"write": [], "read": [], "ping": []}
        for k in range(n):
            for tag, s in sessions:
                t0 = time.perf_counter()
                res = await s.call_tool("todowrite", opencode(k))
                out[tag]["write"].append(time.perf_counter() - t0)
                assert not res.is_error, res.content[0].text
                t0 = time.perf_counter()
                res = await s.call_tool("todoread", {"format": "json"})
                out[tag]["read"].append(time.perf_counter() - t0)
                assert not res.is_error, res.content[0].text
                t0 = time.perf_counter()
                await s.send_ping()
                out[tag]["ping"].append(time.perf_counter() - t0)
    return out


def per_process(cases: list[tuple[str, Path, list[str], Any, Path]], n: int
                ) -> dict[str, list[float]]:
    """A process per call for each case (label, store, arguments, payload maker, code),
    the cases taken in turn call by call."""
    times: dict[str, list[float]] = {tag: [] for tag, *_ in cases}
    for k in range(n):
        for tag, db, args, body, code in cases:
            env = {**os.environ, "PYTHONPATH": str(code), "HARNESS_DB": str(db),
                   "HARNESS_SESSION": "spawn-" + args[0]}
            stdin = json.dumps(body(k)).encode()
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "harness", *args], input=stdin, env=env,
                               capture_output=True, cwd=code)
            times[tag].append(time.perf_counter() - t0)
            assert r.returncode == 0, r.stderr
    return times


def make_store(db: Path, code: Path, leases: bool) -> None:
    """Sessions for the MCP servers and the processes, made by the code in ``code``; in
    "mcp-leased" the MCP client (agent:bench) holds a claim, leased where the code can."""
    env = {**os.environ, "PYTHONPATH": str(code), "HARNESS_DB": str(db)}
    steps = [["session", "new", name, "--no-use"]
             for name in ("mcp", "mcp-leased", "spawn-hook", "spawn-todowrite")]
    steps += [["-s", "mcp-leased", "add", "held by the bench agent", "-p", "high"],
              ["-s", "mcp-leased", "next", "--claim", "--actor", "bench",
               *(["--lease", "1h"] if leases else [])]]
    for args in steps:
        subprocess.run([sys.executable, "-m", "harness", *args], env=env, check=True,
                       capture_output=True, cwd=code)


def hook_payload(k: int) -> dict:
    return {"session_id": "bench", "transcript_path": "/tmp/x.jsonl", "cwd": "/tmp",
            "hook_event_name": "PostToolUse", "tool_name": "TodoWrite",
            "tool_input": claude(k), "tool_response": {}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--spawns", type=int, default=20)
    ap.add_argument("--before", metavar="REF",
                    help="also run the MCP and per-process rows with the code of git "
                         "revision REF")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        os.environ["HARNESS_DATA_DIR"] = str(Path(tmp) / "data")
        os.environ["HARNESS_CONFIG_DIR"] = str(Path(tmp) / "config")
        make_store(db, ROOT, leases=True)
        with Store.open(str(db)) as store:
            store.create_session("inproc", actor="bench")
        codes = [("", db, ROOT)]
        if a.before:
            from bench.before_tree import export_tree, label

            code = export_tree(a.before, Path(tmp) / "before-code")
            old_db = Path(tmp) / "before.db"
            make_store(old_db, code, leases=False)
            codes.append((f" [{label(a.before)}]", old_db, code))
        servers = []
        for tag, where, code in codes:
            env = {**os.environ, "PYTHONPATH": str(code), "HARNESS_DB": str(where)}
            servers += [(tag, {**env, "HARNESS_SESSION": "mcp"}, code),
                        (f", holding a lease{tag}", {**env, "HARNESS_SESSION": "mcp-leased"},
                         code)]
        base = in_process(db, a.calls)
        mcp = anyio.run(over_mcp, servers, a.calls)
        rows = [("in-process agents.tools todowrite (baseline)", base)]
        for tag, _env, _code in servers:
            rows += [(f"MCP todowrite{tag}", mcp[tag]["write"]),
                     (f"MCP todoread json{tag}", mcp[tag]["read"]),
                     (f"MCP ping{tag}", mcp[tag]["ping"])]
        cases = []
        for tag, where, code in codes:
            cases += [(f"hook claude-code TodoWrite (a process per call){tag}", where,
                       ["hook", "claude-code"], hook_payload, code),
                      (f"CLI harness todowrite (a process per call){tag}", where,
                       ["todowrite"], opencode, code)]
        rows += list(per_process(cases, a.spawns).items())
    ref = statistics.median(base)
    width = max(len(name) for name, _ in rows)
    print(f"{'path':<{width}} {'n':>5} {'median ms':>10} {'p90 ms':>9} {'x base':>8}")
    for name, xs in rows:
        med = statistics.median(xs)
        p90 = sorted(xs)[int(len(xs) * 0.9) - 1]
        print(f"{name:<{width}} {len(xs):>5} {med * 1e3:>10.2f} {p90 * 1e3:>9.2f} "
              f"{med / ref:>8.1f}")


if __name__ == "__main__":
    main()
