"""How long an agent waits for the harness: the commands it runs on every todo change,
each a fresh process, against `python -c pass` measured in the same run.

    .venv/bin/python bench/agent_latency.py              # one table
    .venv/bin/python bench/agent_latency.py --runs 50 --json

Cases (issue 15): `harness hook claude-code` on a 30-item TodoWrite and on a TaskUpdate,
`harness todoread --format prompt`, `harness todowrite` of 30 items; and the same
commands through the click route (HARNESS_NO_FAST_PATH=1), which is what they cost before
the fast route. Every write changes one status (the calls alternate between two
payloads), so each run really writes. The runs of all cases are interleaved, so a burst
of load on a shared machine falls on all of them alike; the table gives each case's
median and its ratio to the baseline's median. Target: <= 120 ms median on a quiet
machine (there, `python -c pass` takes ~15-20 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from process_timing import harness_exe, latency_rows, print_table, timed_run, todowrite_payloads

ROOT = Path(__file__).resolve().parent.parent
HOOKS = ROOT / "tests" / "data" / "hooks"


def hook_todowrite_payloads() -> list[bytes]:
    base = json.loads((HOOKS / "claude-post-tool-use-todowrite-30.json").read_text())
    out = []
    for flip in ("in_progress", "completed"):
        doc = json.loads(json.dumps(base))
        doc["tool_input"]["todos"][9]["status"] = flip
        out.append(json.dumps(doc).encode())
    return out


def task_update_payloads() -> list[bytes]:
    base = json.loads((HOOKS / "claude-post-tool-use-task-update-in-progress.json").read_text())
    out = []
    for flip in ("in_progress", "completed"):
        doc = json.loads(json.dumps(base))
        doc["tool_input"]["status"] = flip
        out.append(json.dumps(doc).encode())
    return out


def setup(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "HARNESS_DB": str(tmp / "state.db"),
           "HARNESS_DATA_DIR": str(tmp / "data"), "HARNESS_CONFIG_DIR": str(tmp / "config"),
           "HARNESS_SESSION": "bench", "PYTHONPATH": str(ROOT)}
    exe = harness_exe()
    # One session per agent, as in real use: a TodoWrite list and a task list do not mix.
    for args, stdin, session in ((["session", "new", "bench"], b"", "bench"),
                                 (["todowrite"], todowrite_payloads()[0], "bench"),
                                 (["hook", "claude-code"],
                                  (HOOKS / "claude-task-created.json").read_bytes(), "tasks")):
        subprocess.run([*exe, *args], input=stdin, env={**env, "HARNESS_SESSION": session},
                       check=True, capture_output=True)
    return env


def cases(env: dict[str, str]) -> list[tuple[str, list[str], list[bytes], dict[str, str]]]:
    exe = harness_exe()
    fast = [
        ("hook claude-code, TodoWrite of 30", [*exe, "hook", "claude-code"],
         hook_todowrite_payloads(), "todowrite-hook"),
        ("hook claude-code, TaskUpdate", [*exe, "hook", "claude-code"], task_update_payloads(),
         "tasks"),
        ("todoread --format prompt", [*exe, "todoread", "--format", "prompt"], [b""], "bench"),
        ("todowrite of 30", [*exe, "todowrite"], todowrite_payloads(), "bench"),
    ]
    out = [("python -c pass (baseline)", [sys.executable, "-c", "pass"], [b""], env)]
    out += [(name, argv, stdins, {**env, "HARNESS_SESSION": session})
            for name, argv, stdins, session in fast]
    out += [(f"{name} [click route]", argv, stdins,
             {**env, "HARNESS_SESSION": session, "HARNESS_NO_FAST_PATH": "1"})
            for name, argv, stdins, session in fast]
    return out


def measure(runs: int) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory(prefix="agent-latency-") as tmp:
        env = setup(Path(tmp))
        todo = cases(env)
        times: dict[str, list[float]] = {name: [] for name, *_ in todo}
        for i in range(runs):
            for name, argv, stdins, case_env in todo:
                stdin = stdins[i % len(stdins)]
                r, dt, _cpu = timed_run(argv, stdin, case_env)
                if r.returncode != 0 or b"logged to" in r.stderr:
                    raise SystemExit(f"{name} failed: {r.stderr.decode()[-500:]}")
                times[name].append(dt)
    return latency_rows(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = measure(args.runs)
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load_1m": load, "cpus": os.cpu_count(), "rows": rows}))
        return
    print(f"{args.runs} runs each, interleaved; load average {load:.2f} on "
          f"{os.cpu_count()} CPUs")
    print_table(rows)


if __name__ == "__main__":
    main()
