"""`harness doctor` on the real agent programs from npm (found through HARNESS_*_BIN, as
on PATH), before and after the installers: whether each model can write todos, whether
the harness sees them, and what to do. Nothing is run but the harness itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agents.real import npm
from tests.agents.real.conftest import HARNESS_CMD
from tests.conftest import harness_subprocess

pytestmark = [pytest.mark.real_agent]


def doctor(project: Path, env: dict[str, str], *args: str) -> tuple[int, Any]:
    r = harness_subprocess(["doctor", "--json", *args], cwd=project, env=env)
    assert r.stderr == b"", r.stderr
    return r.returncode, {f["agent"]: f for f in json.loads(r.stdout)}


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "proj"
    project.mkdir()
    for key in ("CLAUDE_CODE_ENABLE_TODO_TOOLS", "ANTHROPIC_MODEL"):
        monkeypatch.delenv(key, raising=False)  # set by no one: the files decide
    env = {"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
           "CODEX_HOME": str(tmp_path / "codex"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "HARNESS_DB": str(tmp_path / "state.db"),
           "HARNESS_CLAUDE_BIN": str(npm.claude_code(npm.versions("claude-code")[0])),
           "HARNESS_CODEX_BIN": str(npm.codex()), "HARNESS_OPENCODE_BIN": str(npm.opencode()),
           "HARNESS_GEMINI_BIN": str(npm.gemini_cli()),
           "HARNESS_COPILOT_BIN": str(npm.program("copilot")),
           "HARNESS_PI_BIN": str(npm.program("pi")),
           "GEMINI_CLI_HOME": str(tmp_path / "home")}
    return project, env


def test_doctor_before_and_after_the_installers(setup: tuple[Path, dict[str, str]]) -> None:
    project, env = setup
    code, found = doctor(project, env)
    assert code == 1
    claude, codex, opencode = found["claude-code"], found["codex"], found["opencode"]
    assert claude["version"] == npm.versions("claude-code")[0] and not claude["writes"]
    assert "gives today's models no todo tools without CLAUDE_CODE_ENABLE_TODO_TOOLS=1" \
        in claude["how"]
    assert claude["todo"] == ["run `harness hook claude-code install` here (sets "
                              "CLAUDE_CODE_ENABLE_TODO_TOOLS=1 in .claude/settings.json's "
                              "env, installs the hooks, registers the MCP server)"]
    assert not codex["writes"] and "update_plan is off" in codex["how"]
    assert opencode["writes"] and not opencode["seen"]
    assert "examples/opencode-plugin/harness-todos.js" in opencode["todo"][0]
    gemini = found["gemini-cli"]
    assert gemini["version"] == npm.versions("gemini-cli")[0] and not gemini["writes"]
    assert gemini["todo"] == ["run `harness hook gemini-cli install` here (turns the task "
                              "tracker on, installs the hooks)"]
    copilot = found["copilot"]
    assert copilot["version"] == npm.versions("copilot")[0]
    assert copilot["writes"] and not copilot["seen"]
    pi = found["pi"]
    assert pi["version"] == npm.versions("pi")[0] and not pi["writes"] and not pi["seen"]
    assert pi["todo"] == ["run `harness hook pi install` here (writes the extension: a "
                          "todowrite tool backed by the harness)"]
    assert pi["tools"] == ["todowrite"] and "next tool's result" in pi["notices"]

    cmd = ["--command", f"{HARNESS_CMD} hook claude-code"]
    assert harness_subprocess(["hook", "claude-code", "install", *cmd], cwd=project,
                              env=env).returncode == 0
    assert harness_subprocess(["hook", "codex", "install", "--codex", env["HARNESS_CODEX_BIN"]],
                              cwd=project, env=env).returncode == 0
    for agent in ("gemini-cli", "copilot"):
        assert harness_subprocess(["hook", agent, "install"], cwd=project,
                                  env=env).returncode == 0
    assert harness_subprocess(["hook", "pi", "install", "--command", f"{HARNESS_CMD} hook pi"],
                              cwd=project, env=env).returncode == 0
    plugins = project / ".opencode" / "plugins"
    plugins.mkdir(parents=True)
    (plugins / "harness-todos.js").write_text("// the plugin\n")
    code, found = doctor(project, env)
    claude, codex, opencode = found["claude-code"], found["codex"], found["opencode"]
    assert claude["writes"] and claude["seen"] and claude["todo"] == []
    assert claude["how"] == ("its todo tools (CLAUDE_CODE_ENABLE_TODO_TOOLS=1 in "
                             ".claude/settings.json)")
    assert codex["writes"] and not codex["seen"]  # Codex does not trust the project yet
    assert codex["todo"][0].startswith("trust this project in Codex")
    assert opencode["writes"] and opencode["seen"] and code == 1
    gemini = found["gemini-cli"]
    assert gemini["writes"] and not gemini["seen"]  # the folder is not trusted yet
    assert gemini["how"] == "the task tracker (experimental.taskTracker in " \
                            ".gemini/settings.json)"
    assert gemini["todo"][0].startswith("trust this folder in Gemini CLI")
    assert found["copilot"]["seen"] and found["copilot"]["todo"] == []
    pi = found["pi"]
    assert pi["writes"] and pi["seen"] and pi["todo"] == []
    assert pi["how"] == "todowrite (the harness's extension, .pi/extensions/todo-harness.ts)"
    human = harness_subprocess(["doctor", "--agent", "claude-code"], cwd=project, env=env)
    assert human.returncode == 0 and human.stdout.decode().splitlines()[1:] == [
        "  writes todos: yes, with its todo tools (CLAUDE_CODE_ENABLE_TODO_TOOLS=1 in "
        ".claude/settings.json)",
        "  the harness sees them: yes, the harness hooks in .claude/settings.json"]


def test_doctor_on_the_mcp_path_and_on_the_older_claude_code(
        setup: tuple[Path, dict[str, str]]) -> None:
    project, env = setup
    assert harness_subprocess(["hook", "claude-code", "install", "--no-todo-tools"],
                              cwd=project, env=env).returncode == 0
    code, found = doctor(project, env, "--agent", "claude-code")
    claude = found["claude-code"]
    assert code == 0 and claude["writes"] and claude["seen"]
    assert claude["how"].startswith("mcp__harness__todowrite only")
    assert claude["seen_how"] == "through the harness MCP server (.mcp.json)"
    older = npm.PROGRAMS["claude-code"].versions[-1]
    env = {**env, "HARNESS_CLAUDE_BIN": str(npm.claude_code(older))}
    claude = doctor(project, env, "--agent", "claude-code")[1]["claude-code"]
    assert claude["version"] == older and claude["writes"] and claude["seen"]
    assert claude["how"] == f"its todo tools (TaskCreate, TodoWrite): Claude Code {older} " \
                            "gates none"
    bad = harness_subprocess(["doctor", "--agent", "aider"], cwd=project, env=env)
    assert bad.returncode == 2 and b"unknown agent 'aider'" in bad.stderr
