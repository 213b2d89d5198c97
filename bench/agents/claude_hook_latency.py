"""How long the harness hooks hold up the real Claude Code, timed from its own stream.

    .venv/bin/python -m bench.agents.claude_hook_latency            # one table
    .venv/bin/python -m bench.agents.claude_hook_latency --rounds 30 --json
    .venv/bin/python -m bench.agents.claude_hook_latency --version 2.1.197
    .venv/bin/python -m bench.agents.claude_hook_latency --rounds 10 --repeat 3 --before main

Claude Code (``--version``, default the newest that tests/agents/real/npm.py pins, from
its npm cache) runs ``-p`` against the scripted Anthropic API of
tests/agents/real/anthropic_server.py, which makes it call ``TaskCreate`` once and then
``TaskUpdate`` (status flipping) and ``TaskList`` for ``--rounds`` rounds; where Claude
Code defers the task tools (2.1.233 and later, with the switch that ``harness hook
claude-code install`` sets) the model first loads them with ``ToolSearch``, as a real one
would. With ``--output-format stream-json --include-hook-events`` Claude
Code writes a ``hook_started`` and a ``hook_response`` line around every hook it runs; a
hook's latency is the time between the two lines' arrival (read as they come, so it
includes Claude Code's own spawn and pipe handling). The store is made before Claude
Code starts, as in a project at work.

Two projects, the same script, in the same run: one with the hooks ``harness hook
claude-code install`` writes, and a baseline with the same events hooked to ``cat
>/dev/null`` (what any command hook costs inside Claude Code). The table gives each hook
event's median for both, and the ratio.

Agents hold leased claims (issue 35): in the harness project Claude Code holds one (an
hour's lease, claimed before the run), so every hook renews it. ``--before REF`` adds a
third project whose hooks run the code of git revision REF (holding the same claim, as
that code can: without a lease), and the table a column for it. Each project is a run of
Claude Code of its own, one after the other; ``--repeat N`` takes turns N times and pools
the figures, so a change of load on a shared machine falls on all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench.process_timing import hook_rows, print_hook_table
from tests.agents.real.anthropic_server import (
    AnthropicServer,
    Reply,
    Request,
    ToolCall,
)
from tests.agents.real.claude_run import PROJECT, ClaudeProject
from tests.agents.real.npm import versions

ROOT = Path(__file__).resolve().parents[2]


def script(rounds: int):  # type: ignore[no-untyped-def]
    steps = [Reply(calls=[ToolCall("TaskCreate", {"subject": "Train the drafter",
                                                  "description": "3 epochs",
                                                  "activeForm": "Training the drafter"})])]
    for i in range(rounds):
        status = "in_progress" if i % 2 == 0 else "pending"
        steps.append(Reply(calls=[ToolCall("TaskUpdate", {"taskId": "1", "status": status})]))
        steps.append(Reply(calls=[ToolCall("TaskList", {})]))

    searched: list[int] = []

    def answer(req: Request, before: list[Request]) -> Reply:
        if not req.agent_turn or req.compaction:
            return Reply(text="A title.")
        deferred = [t for t in ("TaskCreate", "TaskUpdate", "TaskList") if t in req.deferred
                    and not req.loaded(t)]
        if deferred and not searched:
            searched.append(len(before))
            return Reply(calls=[ToolCall("ToolSearch", {"query": "select:" + ",".join(
                deferred)})])
        k = len(before) - len(searched)
        return steps[k] if k < len(steps) else Reply(text="done.")

    return answer, len(steps) + 6


def timed_run(project: ClaudeProject) -> dict[str, list[float]]:
    """Run Claude Code once; every hook's latency in ms, by hook name."""
    argv = [str(project.claude), "-p", "Plan the work as tasks.", "--output-format",
            "stream-json", "--verbose", "--include-hook-events"]
    proc = subprocess.Popen(argv, cwd=project.dir, env=project.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    started: dict[str, float] = {}
    out: dict[str, list[float]] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.perf_counter()
        if not line.startswith("{"):
            continue
        ev = json.loads(line)
        if ev.get("type") != "system":
            continue
        if ev.get("subtype") == "hook_started":
            started[ev["hook_id"]] = now
        elif ev.get("subtype") == "hook_response" and ev.get("hook_id") in started:
            out.setdefault(ev["hook_name"], []).append(
                (now - started.pop(ev["hook_id"])) * 1000)
    if proc.wait(timeout=600) != 0:
        raise SystemExit(f"claude exited {proc.returncode}")
    return out


def project(tmp: Path, rounds: int, baseline: bool, version: str, code: Path = ROOT,
            lease: bool = True) -> tuple[AnthropicServer, ClaudeProject]:
    answer, limit = script(rounds)
    api = AnthropicServer(answer, max_requests=limit)
    api.__enter__()
    claude = ClaudeProject(tmp, api, version=version, PYTHONPATH=str(code))
    # A store that is there already, as in a project at work: its creation (one
    # SQLAlchemy import, the migrations) is not the first hook's to pay.
    claude.harness("session", "new", PROJECT, "--no-use")
    if not baseline:
        # Claude Code holds a claim in the session its hooks use, as a worker would.
        claude.person("add", "held by Claude Code", "-p", "high")
        claude.person("next", "--claim", "--actor", "claude-code",
                      *(["--lease", "1h"] if lease else []))
    if baseline:
        settings = claude.dir / ".claude" / "settings.json"
        doc = json.loads(settings.read_text())
        for groups in doc["hooks"].values():
            for group in groups:
                group["hooks"] = [{"type": "command", "command": "cat >/dev/null"}]
        settings.write_text(json.dumps(doc, indent=2))
    return api, claude


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15,
                    help="TaskUpdate + TaskList rounds per run (default 15)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--version", default=versions("claude-code")[0],
                    help="the Claude Code version (default: the newest pinned)")
    ap.add_argument("--before", metavar="REF",
                    help="also run the hooks with the code of git revision REF")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the projects this many times each, taking turns, and pool "
                         "the figures (load on a shared machine then falls on all alike)")
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="claude-hook-bench-") as tmp:
        runs: list[tuple[str, bool, Path]] = [("baseline", True, ROOT), ("harness", False, ROOT)]
        if args.before:
            from bench.before_tree import export_tree

            runs.append(("before", False, export_tree(args.before, Path(tmp) / "before-code")))
        for turn, (name, baseline, code) in enumerate(runs * args.repeat):
            where = Path(tmp) / f"{name}-{turn}"
            where.mkdir()
            api, claude = project(where, args.rounds, baseline, args.version, code,
                                  lease=name == "harness")
            try:
                for hook_name, ms in timed_run(claude).items():
                    results.setdefault(name, {}).setdefault(hook_name, []).extend(ms)
            finally:
                api.__exit__()
            if not baseline:
                log = claude.hook_log()
                if log:
                    raise SystemExit(f"the harness hooks logged errors:\n{log}")
    rows = hook_rows(results)
    if args.json:
        print(json.dumps({"version": args.version, "rounds": args.rounds, "rows": rows},
                         indent=2))
        return
    print_hook_table(f"Claude Code {args.version} hook latency, median ms, {args.rounds} "
                     f"rounds (baseline: the same hooks as `cat >/dev/null`"
                     + (f"; before: the hooks of {args.before}" if args.before else "") + ")",
                     rows)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
