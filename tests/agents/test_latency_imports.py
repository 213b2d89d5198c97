"""The commands an agent runs on every todo change stay off the heavy modules.

Each runs through the real entry point in a fresh interpreter, on a store that exists
(creating one runs the migrations, which use SQLAlchemy), and must not have imported the
ORM, SQLAlchemy, pydantic, click, Textual or the MCP SDK: importing those was most of
the 0.7 s such a process cost (docs/PERFORMANCE.md, "Agent calls";
bench/agents/latency.py measures it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import import_probe
from tests.conftest import DATA, ROOT

HEAVY = {"sqlalchemy", "sqlmodel", "pydantic", "pydantic_core", "click", "textual", "rich",
         "mcp", "anyio", "jsonschema", "yaml", "fabric", "invoke", "paramiko"}


def _hook(name: str) -> str:
    return (DATA / "hooks" / f"{name}.json").read_text()


CASES = {
    "todowrite": (["todowrite"], import_probe.TODOS),
    "todoread": (["todoread", "--format", "prompt"], ""),
    "todoread-json": (["todoread", "--format=json"], ""),
    "next": (["next", "--claim", "--actor", "w1"], ""),
    "hook-todowrite": (["hook", "claude-code"], _hook("claude-post-tool-use-todowrite-30")),
    "hook-task-update": (["hook", "claude-code"],
                         _hook("claude-post-tool-use-task-update-in-progress")),
    "hook-session-start": (["hook", "claude-code"], _hook("claude-session-start-compact")),
    "hook-pre-compact": (["hook", "claude-code"], _hook("claude-pre-compact-auto")),
    "hook-codex": (["hook", "codex"], _hook("codex-post-tool-use-update-plan")),
    "hook-opencode": (["hook", "opencode"], json.dumps(
        {"type": "todo.updated", "properties": {"sessionID": "s", "todos": []}})),
    "hook-gemini-tracker": (["hook", "gemini-cli"], json.dumps(
        {"session_id": "g1", "transcript_path": "", "cwd": "/work/eagle3",
         "hook_event_name": "AfterTool", "tool_name": "tracker_create_task",
         "tool_input": {"title": "Train", "description": "3 epochs", "type": "task"},
         "tool_response": {"llmContent": "Created task 0a1b2c: Train"}})),
    "hook-copilot": (["hook", "copilot", "--event", "userPromptSubmitted"], json.dumps(
        {"sessionId": "c1", "timestamp": 1796409664735, "cwd": "/work/eagle3",
         "prompt": "go on"})),
    "hook-gemini-pre-compress": (["hook", "gemini-cli"], json.dumps(
        {"session_id": "g1", "transcript_path": "", "cwd": "/work/eagle3",
         "hook_event_name": "PreCompress", "trigger": "manual"})),
}


@pytest.fixture(scope="module")
def warm_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A store with a list and a known Claude task on it, made by a real harness."""
    return import_probe.warm_store(tmp_path_factory.mktemp("latency"), (
        (["session", "new", "bench"], ""), (["todowrite"], import_probe.TODOS),
        (["hook", "claude-code"], _hook("claude-task-created"))))


@pytest.mark.sqlite
@pytest.mark.parametrize("case", sorted(CASES))
def test_agent_commands_do_not_import_heavy_modules(warm_store: dict[str, str],
                                                    case: str) -> None:
    args, stdin = CASES[case]
    probe, err = import_probe.probe(warm_store, args, stdin, HEAVY)
    assert probe["code"] in (0, None), err
    assert "logged to" not in err, err
    assert probe["heavy"] == [], f"{case} imported {probe['heavy']}"


@pytest.mark.sqlite
def test_anything_else_still_goes_to_click(warm_store: dict[str, str]) -> None:
    """A line the fast route does not know (here --help) is click's, with click's text."""
    r = subprocess.run([sys.executable, "-m", "harness", "todoread", "--help"],
                       env=warm_store, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Usage: harness todoread" in r.stdout
    bad = subprocess.run([sys.executable, "-m", "harness", "todoread", "--format", "yaml"],
                         env=warm_store, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "'yaml' is not one of" in bad.stderr


def test_the_fast_route_parses_exactly_what_it_knows() -> None:
    from harness.cli import hot

    assert hot.parse(["todoread"]) == (("todoread",), {})
    assert hot.parse(["--db", "x.db", "todoread", "-s", "a", "--format=json"]) == (
        ("todoread",), {"db": "x.db", "session": "a", "--format": "json"})
    assert hot.parse(["hook", "claude-code", "--actor", "cc"]) == (
        ("hook", "claude-code"), {"--actor": "cc"})
    for line in (["hook", "claude-code", "install"], ["todoread", "--help"], ["hook"],
                 ["todowrite", "--format", "yaml"], ["next", "--claim=yes"], ["list"],
                 ["todoread", "--db"], [], ["todoread", "extra"]):
        assert hot.parse(line) is None, line


def test_the_store_modules_do_not_import_sqlalchemy() -> None:
    code = ("import sys, state.store, state.read.readers, state.tx, state.db.connection; "
            "print(sorted(m for m in ('sqlalchemy', 'sqlmodel') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=60)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_a_new_store_still_gets_its_schema(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(tmp_path / "new.db"),
           "HARNESS_DATA_DIR": str(tmp_path / "data")}
    r = subprocess.run([sys.executable, "-m", "harness", "todoread"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == f"note: {tmp_path / 'new.db'}: created a new, empty store " \
                               "(from HARNESS_DB)"
