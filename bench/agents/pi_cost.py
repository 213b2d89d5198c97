"""What the harness's pi extension costs pi: tokens in its first request to the model, and
milliseconds on a tool call.

    .venv/bin/python -m bench.agents.pi_cost                # both tables
    .venv/bin/python -m bench.agents.pi_cost --rounds 20 --json

pi (the pinned release, from the npm cache: tests/agents/real/npm.py) runs ``-p`` against
the scripted Chat Completions server of tests/agents/real/model_server.py, each setup in a
fresh project and home (tests/agents/real/pi_run.py):

* **tokens**: the first request's body as the model reads it (every string of the
  messages, the system prompt included, and the tools' schemas as compact JSON; cl100k,
  as bench/agents/tokens.py counts), for pi alone (the baseline, in the same run), with
  the extension ``harness hook pi install`` writes and an empty list, and with the
  extension and a 12-item campaign list in the store (given back beside the first
  prompt);
* **milliseconds**: ``--rounds`` rounds of a ``bash`` call (``true``) and, with the
  extension, of a ``todowrite`` (two lists of 12 that differ in one status, in turn). A
  call's time is pi's own: from the session file's entry of the assistant message that
  made the call to the entry of its result (the tool run, then every ``tool_result``
  handler, the extension's one ``harness hook pi`` process among them). The harness is
  the ``harness`` console script beside this interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.agents.tokens import CAMPAIGN, count
from bench.process_timing import harness_exe
from tests.agents.real.model_server import Call, ModelServer, Reply, Request
from tests.agents.real.pi_run import PiProject

ROOT = Path(__file__).resolve().parents[2]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def body_tokens(body: dict[str, Any]) -> tuple[int, int]:
    """(all, the tools' part) of a Chat Completions request, in tokens."""
    text = "\n".join(_strings(body.get("messages")))
    tools = json.dumps(body.get("tools") or [], separators=(",", ":"), ensure_ascii=False)
    return count(text) + count(tools), count(tools)


def _project(tmp: Path, name: str) -> PiProject:
    home = tmp / name / "home"
    home.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT),
           "HARNESS_DB": str(tmp / name / "state.db"), "HARNESS_SESSION": "bench",
           "HARNESS_DATA_DIR": str(tmp / name / "data")}
    return PiProject(tmp / name, env)


def _campaign(n_done: int = 2) -> dict[str, Any]:
    return {"todos": [{"content": text, "status": "completed" if i < n_done else status,
                       "priority": prio} for i, (text, status, prio) in enumerate(CAMPAIGN)]}


def first_request(tmp: Path, name: str, *, extension: bool, todos: bool) -> dict[str, Any]:
    pi = _project(tmp, name)
    if extension:
        pi.install(" ".join(harness_exe()))
    if todos:
        pi.harness("session", "new", "bench")
        pi.harness("todowrite", "--actor", "planner", "--file", str(_write(tmp, _campaign())))
    seen: list[Request] = []

    def script(req: Request, n: int) -> Reply:
        seen.append(req)
        return Reply(text="done.")

    with ModelServer(script, max_requests=5) as srv:
        pi.serve(srv)
        pi.run("-p", "Train the drafter.")
    total, tools = body_tokens(seen[0].body)
    return {"case": name, "tokens": total, "tools_tokens": tools}


def _write(tmp: Path, doc: dict[str, Any]) -> Path:
    path = tmp / "campaign.json"
    path.write_text(json.dumps(doc))
    return path


def _ts(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()


def call_times(session: Path) -> dict[str, list[float]]:
    """Each tool call's time in ms, by tool, from pi's session file."""
    out: dict[str, list[float]] = {}
    last_assistant: float | None = None
    for line in session.read_text().splitlines():
        entry = json.loads(line)
        msg = entry.get("message") if entry.get("type") == "message" else None
        if not isinstance(msg, dict):
            continue
        if msg.get("role") == "assistant":
            last_assistant = _ts(entry)
        elif msg.get("role") == "toolResult" and last_assistant is not None:
            out.setdefault(str(msg.get("toolName")), []).append(
                (_ts(entry) - last_assistant) * 1000)
    return out


def tool_calls(tmp: Path, name: str, *, extension: bool, rounds: int) -> dict[str, list[float]]:
    pi = _project(tmp, name)
    if extension:
        pi.install(" ".join(harness_exe()))
    lists = [_campaign(2), _campaign(3)]

    def script(req: Request, n: int) -> Reply:
        if n >= 2 * rounds:
            return Reply(text="done.")
        if n % 2 == 0 or not extension:
            return Reply(calls=[Call("bash", {"command": "true"})])
        return Reply(calls=[Call("todowrite", lists[(n // 2) % 2])])

    with ModelServer(script, max_requests=2 * rounds + 5) as srv:
        pi.serve(srv)
        pi.run("-p", "Train the drafter.")
    return call_times(pi.sessions()[-1])


def measure(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pi-cost-") as raw:
        tmp = Path(raw)
        tokens = [first_request(tmp, "pi alone", extension=False, todos=False),
                  first_request(tmp, "with the extension, an empty list", extension=True,
                                todos=False),
                  first_request(tmp, f"with the extension, {len(CAMPAIGN)} todos in the store",
                                extension=True, todos=True)]
        alone = tool_calls(tmp, "calls alone", extension=False, rounds=rounds)
        ours = tool_calls(tmp, "calls with", extension=True, rounds=rounds)
    calls = [("bash `true`, pi alone", alone.get("bash", [])),
             ("bash `true`, with the extension (its tool_result call)", ours.get("bash", [])),
             ("todowrite (12 todos: the harness's write and answer)", ours.get("todowrite", []))]
    return {"tokens": tokens,
            "calls": [{"case": case, "n": len(ms), "median_ms": round(statistics.median(ms), 1),
                       "max_ms": round(max(ms), 1)} for case, ms in calls if ms]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10, help="tool calls of each kind")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    found = measure(args.rounds)
    if args.json:
        print(json.dumps(found, indent=2))
        return
    base = found["tokens"][0]["tokens"]
    print("| pi's first request | tokens | of which tools | added |")
    print("| --- | --- | --- | --- |")
    for row in found["tokens"]:
        print(f"| {row['case']} | {row['tokens']} | {row['tools_tokens']} | "
              f"{row['tokens'] - base:+d} |")
    print()
    base_ms = found["calls"][0]["median_ms"]
    print("| tool call | n | median | max | added to pi's own |")
    print("| --- | --- | --- | --- | --- |")
    for row in found["calls"]:
        print(f"| {row['case']} | {row['n']} | {row['median_ms']} ms | {row['max_ms']} ms | "
              f"{row['median_ms'] - base_ms:+.1f} ms |")


if __name__ == "__main__":
    main()
