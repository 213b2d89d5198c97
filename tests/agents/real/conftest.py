"""Shared pieces of the real-program tests: a project directory with its own store, and
the harness command the programs' hooks and plugins run (this checkout, by its full
path, whatever is on PATH)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from state.store import Store
from tests.agents.real import npm
from tests.conftest import ROOT

HARNESS_CMD = f"{shlex.quote(sys.executable)} -m harness"
SESSION = "work"
# The list the Codex and opencode plan tests end with: step 1 done, step 2 started, and
# the priority a person gave the last step while the agent worked.
AFTER_STEP_TWO = [
    {"id": "t1", "text": "Regenerate samples", "status": "completed", "priority": "medium"},
    {"id": "t2", "text": "Build the vocab mapping", "status": "in_progress",
     "priority": "medium"},
    {"id": "t3", "text": "Train the drafter", "status": "pending", "priority": "high"}]


@pytest.fixture(params=npm.versions("claude-code"), ids=lambda v: f"claude-{v}")
def claude_version(request: pytest.FixtureRequest) -> str:
    """Every Claude Code test runs on each version of tests/agents/real/npm.py (the
    newest, and the older one people still run), or on HARNESS_AGENT_VERSIONS's."""
    return str(request.param)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "project"
    proj.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    return proj


@pytest.fixture
def agent_env(tmp_path: Path, project: Path) -> dict[str, str]:
    """The environment the program (and so its hooks) runs in: one store, one session,
    this checkout of the harness, a home of its own."""
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT),
            "HARNESS_DB": str(tmp_path / "state.db"), "HARNESS_SESSION": SESSION,
            "HARNESS_DATA_DIR": str(tmp_path / "data"), "NO_COLOR": "1"}


def harness(env: dict[str, str], *args: str, cwd: Path | None = None,
            stdin: str = "") -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "harness", *args], env=env, cwd=cwd,
                       input=stdin, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def todos(env: dict[str, str]) -> list[dict[str, object]]:
    with Store.open(env["HARNESS_DB"]) as s:
        row = s.session_by_name(SESSION)
        assert row is not None, "the session was never created: no hook ran"
        return [{"id": t.id, "text": t.content, "status": t.status, "priority": t.priority}
                for t in s.todos(row.id)]


def hook_log(env: dict[str, str]) -> str:
    path = Path(env["HARNESS_DATA_DIR"]) / "logs" / "hooks.log"
    return path.read_text() if path.exists() else ""
