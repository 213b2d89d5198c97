"""How long the harness hooks hold up the real Gemini CLI, as Gemini CLI times them.

    .venv/bin/python -m bench.agents.gemini_hook_latency            # one table
    .venv/bin/python -m bench.agents.gemini_hook_latency --rounds 30 --json

Gemini CLI (the pinned version, from npm: tests/agents/real/npm.py) runs ``-p`` against the
scripted Gemini API of tests/agents/real/gemini_server.py, which makes it create a tracker
task once and then, for ``--rounds`` rounds, flip its status (``tracker_update_task``) and
list the tasks (``tracker_list_tasks``). Gemini CLI times every hook it runs itself
(spawn to exit, stdin written and stdout read) and writes it to its local telemetry file
(``telemetry.outfile``) as a ``gemini_cli.hook_call`` record with ``duration_ms``; the
table is those records, by hook event.

Two projects, the same script, in the same run: one with what ``harness hook gemini-cli
install`` writes (the ``harness`` console script beside this interpreter), and a baseline
with the same events hooked to ``cat >/dev/null`` (what any command hook costs inside
Gemini CLI). ``AfterTool`` runs after every tool and ``PreCompress`` before every request
to the model, so the last row, the whole run's wall time, is what a session pays.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench.process_timing import harness_exe, hook_rows, print_hook_table
from tests.agents.real.gemini_run import PROJECT, GeminiProject
from tests.agents.real.gemini_server import Call, GeminiServer, Reply, Request


def script(rounds: int):  # type: ignore[no-untyped-def]
    task: list[str] = []  # the id the tracker gives the task

    def answer(req: Request, before: list[Request]) -> Reply:
        k = len(before)
        if k == 0:
            return Reply(calls=[Call("tracker_create_task", {
                "title": "Train the drafter", "description": "3 epochs", "type": "task"})])
        if not task:
            task.append(req.tool_results()[0].split(":")[0].split()[-1])
        if k > 2 * rounds:
            return Reply(text="done.")
        if k % 2:
            status = "in_progress" if (k // 2) % 2 == 0 else "open"
            return Reply(calls=[Call("tracker_update_task", {"id": task[0],
                                                             "status": status})])
        return Reply(calls=[Call("tracker_list_tasks", {})])

    return answer, 2 * rounds + 10


def hook_calls(outfile: Path) -> dict[str, list[float]]:
    """Gemini CLI's own timing of each hook, by event, from its telemetry file (a stream of
    pretty-printed JSON records)."""
    text = outfile.read_text() if outfile.exists() else ""
    decoder = json.JSONDecoder()
    out: dict[str, list[float]] = {}
    i = 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        record, i = decoder.raw_decode(text, i)
        attrs = record.get("attributes") if isinstance(record, dict) else None
        if isinstance(attrs, dict) and attrs.get("event.name") == "gemini_cli.hook_call":
            out.setdefault(attrs["hook_event_name"], []).append(float(attrs["duration_ms"]))
    return out


def run(tmp: Path, rounds: int, baseline: bool) -> tuple[dict[str, list[float]], float]:
    answer, limit = script(rounds)
    with GeminiServer(answer, max_requests=limit) as api:
        gemini = GeminiProject(tmp, api, "--command",
                               " ".join([*harness_exe(), "hook", "gemini-cli"]))
        gemini.harness("session", "new", PROJECT)  # the store made beforehand, as in use
        settings = gemini.home / ".gemini" / "settings.json"
        user = json.loads(settings.read_text())
        user["telemetry"] = {"enabled": True, "target": "local",
                             "outfile": str(tmp / "telemetry.json"), "logPrompts": False}
        settings.write_text(json.dumps(user))
        if baseline:
            project = gemini.dir / ".gemini" / "settings.json"
            doc = json.loads(project.read_text())
            for groups in doc["hooks"].values():
                for group in groups:
                    group["hooks"] = [{"name": "cat", "type": "command",
                                       "command": "cat >/dev/null"}]
            project.write_text(json.dumps(doc, indent=2))
        start = time.perf_counter()
        r = gemini.run("Plan the work as tasks.")
        took = time.perf_counter() - start
        if r.code != 0:
            raise SystemExit(f"gemini exited {r.code}: {r.stderr[-2000:]}")
        if not baseline and gemini.hook_log():
            raise SystemExit(f"the harness hooks logged errors:\n{gemini.hook_log()}")
    return hook_calls(tmp / "telemetry.json"), took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15,
                    help="tracker_update_task + tracker_list_tasks rounds per run (default 15)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    wall: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="gemini-hook-bench-") as tmp:
        for name, baseline in (("baseline", True), ("harness", False)):
            where = Path(tmp) / name
            where.mkdir()
            results[name], wall[name] = run(where, args.rounds, baseline)
    rows = hook_rows(results)
    rows.append({"hook": "whole run (ms)", "n": 1, "harness_ms": round(wall["harness"] * 1000),
                 "baseline_ms": round(wall["baseline"] * 1000),
                 "ratio": round(wall["harness"] / wall["baseline"], 2)})
    if args.json:
        print(json.dumps({"rounds": args.rounds, "rows": rows}, indent=2))
        return
    print_hook_table(f"Gemini CLI hook latency (Gemini CLI's own timing), median ms, "
                     f"{args.rounds} rounds (baseline: the same hooks as `cat >/dev/null`)",
                     rows)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
