"""How long an agent waits for the harness: the commands it runs on every todo change,
each a fresh process, against `python -c pass` measured in the same run.

    .venv/bin/python -m bench.agents.latency              # one table
    .venv/bin/python -m bench.agents.latency --runs 50 --json
    .venv/bin/python -m bench.agents.latency --before main   # and the code of `main`

Cases (issue 15): `harness hook claude-code` on a 30-item TodoWrite and on a TaskUpdate,
`harness todoread --format prompt`, `harness todowrite` of 30 items; and the same
commands through the click route (HARNESS_NO_FAST_PATH=1), which is what they cost before
the fast route. Every write changes one status (the calls alternate between two
payloads), so each run really writes. The runs of all cases are interleaved, so a burst
of load on a shared machine falls on all of them alike; the table gives each case's
median and its ratio to the baseline's median, and the median CPU time (user + system)
of each process, which a loaded machine disturbs less than the wall time. Target:
<= 120 ms median on a quiet machine (there, `python -c pass` takes ~15-20 ms).

Cases (issue 35) with leased claims: a hook of an agent that holds a lease renews it on
every call (`hook claude-code ... holding a lease`), and every hook first checks whether
it must (`hook claude-code, UserPromptSubmit` reads the list's news and writes nothing).
``--before REF`` runs every case a second time with the code of git revision REF (its
own store, as that code makes it), interleaved with the others, so the table says what
the change costs in one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.process_timing import (
    harness_exe,
    latency_rows,
    print_table,
    timed_run,
    todowrite_payloads,
)

ROOT = Path(__file__).resolve().parents[2]

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


def prompt_payload() -> bytes:
    return json.dumps({"session_id": "bench", "transcript_path": "/tmp/bench.jsonl",
                       "cwd": "/tmp", "hook_event_name": "UserPromptSubmit",
                       "prompt": "carry on"}).encode()


def setup(tmp: Path, code: Path = ROOT, leases: bool = True) -> dict[str, str]:
    """A store made by the code in ``code``; ``leases``: that code knows them."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HARNESS_DB": str(tmp / "state.db"),
           "HARNESS_DATA_DIR": str(tmp / "data"), "HARNESS_CONFIG_DIR": str(tmp / "config"),
           "HARNESS_SESSION": "bench", "PYTHONPATH": str(code)}
    exe = harness_exe()
    created = (HOOKS / "claude-task-created.json").read_bytes()
    # One session per agent, as in real use: a TodoWrite list and a task list do not mix.
    # In "leased", Claude Code holds a claim (with an hour's lease where the code has them).
    steps = [(["session", "new", "bench"], b"", "bench"),
             (["todowrite"], todowrite_payloads()[0], "bench"),
             (["hook", "claude-code"], created, "tasks"),
             (["hook", "claude-code"], created, "leased"),
             (["add", "held by Claude Code", "-p", "high"], b"", "leased"),
             (["next", "--claim", "--actor", "claude-code",
               *(["--lease", "1h"] if leases else [])], b"", "leased")]
    for args, stdin, session in steps:
        subprocess.run([*exe, *args], input=stdin, env={**env, "HARNESS_SESSION": session},
                       check=True, capture_output=True, cwd=tmp)
    return env


def cases(env: dict[str, str], tag: str = "", click: bool = True
          ) -> list[tuple[str, list[str], list[bytes], dict[str, str]]]:
    exe = harness_exe()
    hook = [*exe, "hook", "claude-code"]
    fast = [
        ("hook claude-code, TodoWrite of 30", hook, hook_todowrite_payloads(), "todowrite-hook"),
        ("hook claude-code, TaskUpdate", hook, task_update_payloads(), "tasks"),
        ("hook claude-code, UserPromptSubmit", hook, [prompt_payload()], "tasks"),
        ("hook claude-code, TaskUpdate, holding a lease", hook, task_update_payloads(),
         "leased"),
        ("hook claude-code, UserPromptSubmit, holding a lease", hook, [prompt_payload()],
         "leased"),
        ("todoread --format prompt", [*exe, "todoread", "--format", "prompt"], [b""], "bench"),
        ("todowrite of 30", [*exe, "todowrite"], todowrite_payloads(), "bench"),
    ]
    out = [(name + tag, argv, stdins, {**env, "HARNESS_SESSION": session})
           for name, argv, stdins, session in fast]
    if click:
        out += [(f"{name} [click route]", argv, stdins,
                 {**env, "HARNESS_SESSION": session, "HARNESS_NO_FAST_PATH": "1"})
                for name, argv, stdins, session in fast]
    return out


def measure(runs: int, before: str | None = None) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory(prefix="agent-latency-") as tmp:
        env = setup(Path(tmp) / "now")
        todo = [("python -c pass (baseline)", [sys.executable, "-c", "pass"], [b""], env)]
        if before is None:
            todo += cases(env)
        else:
            from bench.before_tree import export_tree, label

            code = export_tree(before, Path(tmp) / "before-code")
            old_env = setup(Path(tmp) / "before", code, leases=False)
            for now_case, old_case in zip(cases(env, click=False),
                                          cases(old_env, f" [{label(before)}]", click=False),
                                          strict=True):
                todo += [now_case, old_case]
        times: dict[str, list[float]] = {name: [] for name, *_ in todo}
        cpu: dict[str, list[float]] = {name: [] for name, *_ in todo}
        for i in range(runs):
            for name, argv, stdins, case_env in todo:
                stdin = stdins[i % len(stdins)]
                r, dt, used = timed_run(argv, stdin, case_env)
                if r.returncode != 0 or b"logged to" in r.stderr:
                    raise SystemExit(f"{name} failed: {r.stderr.decode()[-500:]}")
                times[name].append(dt)
                cpu[name].append(used)
    return latency_rows(times, cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--before", metavar="REF",
                    help="also run each case with the code of git revision REF")
    args = ap.parse_args()
    rows = measure(args.runs, args.before)
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load_1m": load, "cpus": os.cpu_count(), "rows": rows}))
        return
    print(f"{args.runs} runs each, interleaved; load average {load:.2f} on "
          f"{os.cpu_count()} CPUs")
    print_table(rows)


if __name__ == "__main__":
    main()
