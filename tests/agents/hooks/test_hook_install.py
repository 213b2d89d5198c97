"""`harness hook claude-code install` and `harness hook codex install`: merged into the
agent's own settings files, other hooks kept, idempotent, `--dry-run` a diff; and the
hooks they install run, as the agent would run them. `uninstall` takes out our hooks
(every agent's) and nothing else."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from state.store import Store
from tests.conftest import DATA, harness_subprocess

THEIRS = {
    "permissions": {"allow": ["Bash(pytest:*)"]},
    "hooks": {
        "PostToolUse": [{"matcher": "Edit|Write",
                         "hooks": [{"type": "command", "command": "ruff format $FILE"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
}


def install(agent: str, cwd: Path, *args: str, home: Path | None = None,
            verb: str = "install"):
    env = {"HOME": str(home or cwd / "home"), "CODEX_HOME": str((home or cwd / "home") / ".codex")}
    return harness_subprocess(["hook", agent, verb, *args], cwd=cwd, env=env)


def test_claude_code_install_keeps_other_hooks_and_is_idempotent(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(THEIRS, indent=4) + "\n")
    before = settings.read_text()
    dry = install("claude-code", tmp_path, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    diff = dry.stdout.decode()
    assert diff.startswith(f"--- {settings}\n+++ {settings}\n")
    assert '"TodoWrite|TaskCreate|TaskUpdate|TaskList|TaskGet"' in diff
    assert settings.read_text() == before  # a dry run writes nothing
    r = install("claude-code", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "added the harness hooks (PostToolUse, PreToolUse, UserPromptSubmit, TaskCreated, " \
           "TaskCompleted, PreCompact, PostCompact, SessionStart)" in r.stdout.decode()
    out = r.stdout.decode()
    doc = json.loads(settings.read_text())
    # Theirs kept; ours beside it: the hooks and the todo-tools switch. With the tools on,
    # no MCP server (it would cost context for a list the hooks keep).
    assert doc["permissions"] == THEIRS["permissions"]
    assert doc["env"] == {"CLAUDE_CODE_ENABLE_TODO_TOOLS": "1"}
    assert "enabledMcpjsonServers" not in doc and not (tmp_path / ".mcp.json").exists()
    told = [line for line in out.splitlines() if line.startswith("todo tools:")]
    assert len(told) == 1 and told[0].startswith(
        f"todo tools: turned on (CLAUDE_CODE_ENABLE_TODO_TOOLS=1 in {settings}), because "
        "Claude Code 2.1.233 and later give today's models")
    hooks = doc["hooks"]
    assert hooks["Stop"] == THEIRS["hooks"]["Stop"]
    assert hooks["PostToolUse"][0] == THEIRS["hooks"]["PostToolUse"][0]
    ours = hooks["PostToolUse"][1]
    assert ours["matcher"] == "TodoWrite|TaskCreate|TaskUpdate|TaskList|TaskGet"
    assert hooks["PreToolUse"][0]["matcher"] == "TaskList|TaskGet"
    assert ours["hooks"][0]["type"] == "command"
    assert ours["hooks"][0]["command"].endswith("hook claude-code")
    assert hooks["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    for event in ("UserPromptSubmit", "TaskCreated", "TaskCompleted", "PreCompact",
                  "PostCompact"):
        assert "matcher" not in hooks[event][0]
    after = settings.read_text()
    again = install("claude-code", tmp_path)
    assert again.returncode == 0 and b"already up to date" in again.stdout
    assert b"todo tools: already on" in again.stdout
    assert settings.read_text() == after
    dry = install("claude-code", tmp_path, "--dry-run")
    assert b"already up to date (nothing to change)" in dry.stdout


def test_no_todo_tools_leaves_the_switch_off_and_registers_the_mcp_server(
        tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    dry = install("claude-code", tmp_path, "--dry-run").stdout.decode()
    assert '+    "CLAUDE_CODE_ENABLE_TODO_TOOLS": "1"' in dry and ".mcp.json" not in dry
    assert "todo tools: would turn on" in dry and not settings.exists()
    dry = install("claude-code", tmp_path, "--dry-run", "--no-todo-tools").stdout.decode()
    assert "CLAUDE_CODE_ENABLE_TODO_TOOLS" not in dry.split("todo tools:")[0]
    assert f"+++ {tmp_path / '.mcp.json'}" in dry and '+        "claude-code",' in dry
    assert not settings.exists() and not (tmp_path / ".mcp.json").exists()
    r = install("claude-code", tmp_path, "--no-todo-tools")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    doc = json.loads(settings.read_text())
    assert "env" not in doc and doc["enabledMcpjsonServers"] == ["harness"]
    assert doc["permissions"]["allow"] == ["mcp__harness__todowrite", "mcp__harness__todoread",
                                           "mcp__harness__todo_update"]
    server = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["harness"]
    assert server["type"] == "stdio" and server["args"][-5:] == [
        "mcp", "--agent", "claude-code", "--tools", "todowrite,todoread,todo_update"]
    assert f"{tmp_path / '.mcp.json'}: registered the harness MCP server " \
           "(mcpServers.harness)" in out
    assert "todo tools: left off (--no-todo-tools): on today's models the model keeps its " \
           "plan with mcp__harness__todowrite" in out
    again = install("claude-code", tmp_path, "--no-todo-tools").stdout.decode()
    assert again.count("already up to date") == 2
    # A switch the user set is theirs: never changed, said; the server stays.
    doc["env"] = {"CLAUDE_CODE_ENABLE_TODO_TOOLS": "0", "FOO": "bar"}
    settings.write_text(json.dumps(doc))
    r = install("claude-code", tmp_path)
    assert json.loads(settings.read_text())["env"] == doc["env"]
    assert "todo tools: left off (CLAUDE_CODE_ENABLE_TODO_TOOLS is '0' there)" in \
        r.stdout.decode()


def test_an_mcp_config_we_cannot_read_stops_the_install_before_any_write(
        tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text("{oops")
    r = install("claude-code", tmp_path, "--no-todo-tools")
    err = r.stderr.decode()
    assert r.returncode == 1 and ".mcp.json" in err and "not valid JSON" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / ".claude").exists()


def test_a_harness_server_already_registered_is_left_as_it_is(tmp_path: Path) -> None:
    mine = {"mcpServers": {"harness": {"command": "harness", "args": ["-s", "x", "mcp"]},
                           "other": {"command": "other-mcp"}}, "mine": 1}
    (tmp_path / ".mcp.json").write_text(json.dumps(mine))
    r = install("claude-code", tmp_path, "--mcp")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / ".mcp.json").read_text()) == mine
    assert f"{tmp_path / '.mcp.json'}: already up to date" in r.stdout.decode()
    assert "todo tools: turned on" in r.stdout.decode()


def test_an_older_install_gains_only_the_events_it_lacks(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    old = {"hooks": {"PostToolUse": [{"matcher": "TodoWrite|TaskCreate|TaskUpdate", "hooks": [
        {"type": "command", "command": "HARNESS_SESSION=eagle3 harness hook claude-code"}]}]}}
    settings.write_text(json.dumps(old))
    r = install("claude-code", tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(settings.read_text())
    assert doc["hooks"]["PostToolUse"] == old["hooks"]["PostToolUse"]  # left as it was
    assert "note: the harness's PostToolUse hook matches 'TodoWrite|TaskCreate|TaskUpdate', " \
           "not TaskList, TaskGet: set its matcher to " \
           "'TodoWrite|TaskCreate|TaskUpdate|TaskList|TaskGet' for them" in r.stdout.decode()
    assert set(doc["hooks"]) == {"PostToolUse", "PreToolUse", "UserPromptSubmit", "TaskCreated",
                                 "TaskCompleted", "PreCompact", "PostCompact", "SessionStart"}


def test_user_scope_and_a_custom_command(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = install("claude-code", tmp_path, "--user", "--no-todo-tools", "--command",
                "harness hook claude-code", home=home)
    assert r.returncode == 0, r.stderr
    doc = json.loads((home / ".claude" / "settings.json").read_text())
    assert doc["hooks"]["SessionStart"][0]["hooks"][0]["command"] == "harness hook claude-code"
    assert "enabledMcpjsonServers" not in doc  # a project's .mcp.json is the project's
    # The user's MCP servers are in ~/.claude.json; the server runs as --command does.
    user = json.loads((home / ".claude.json").read_text())
    assert user["mcpServers"]["harness"]["command"] == "harness"
    assert user["mcpServers"]["harness"]["args"] == ["mcp", "--agent", "claude-code", "--tools",
                                                     "todowrite,todoread,todo_update"]
    assert not (tmp_path / ".claude").exists() and not (tmp_path / ".mcp.json").exists()


@pytest.mark.parametrize("text,message", [
    ("{not json", "not valid JSON"),
    ('["a list"]', "not a JSON object"),
    ('{"hooks": []}', "`hooks` is not an object"),
    ('{"env": "x"}', "`env` is not an object"),
    ('{"permissions": {"allow": "x"}}', "`permissions.allow` is not a list"),
])
def test_a_settings_file_we_cannot_read_is_left_alone(tmp_path: Path, text: str,
                                                      message: str) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(text)
    r = install("claude-code", tmp_path)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert settings.read_text() == text


def test_the_installed_hooks_run_as_claude_code_runs_them(tmp_path: Path) -> None:
    """The command written into settings.json, run by a shell with a recorded payload."""
    db = tmp_path / "state.db"
    assert install("claude-code", tmp_path).returncode == 0
    doc = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    command = doc["hooks"]["TaskCreated"][0]["hooks"][0]["command"]
    payload = (DATA / "hooks" / "claude-task-created.json").read_bytes()
    from tests.conftest import ROOT

    r = subprocess.run(["sh", "-c", command], input=payload, capture_output=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                                        "HARNESS_DB": str(db),
                                        "HARNESS_DATA_DIR": str(tmp_path / "data")})
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    with Store.open(str(db)) as s:
        row = s.session_by_name("eagle3")
        assert row is not None
        assert [t.content for t in s.todos(row.id)] == ["Regenerate 10K samples with <think> kept"]


def test_codex_install_writes_hooks_json(tmp_path: Path) -> None:
    hooks_json = tmp_path / ".codex" / "hooks.json"
    hooks_json.parent.mkdir()
    hooks_json.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "python3 .codex/hooks/stop.py", "timeout": 30}]}]}}))
    r = install("codex", tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "SessionStart, PreCompact, PostCompact, PostToolUse" in out
    assert "trust" in out  # Codex asks before running new hooks
    doc = json.loads(hooks_json.read_text())
    assert doc["hooks"]["Stop"][0]["hooks"][0]["command"] == "python3 .codex/hooks/stop.py"
    assert doc["hooks"]["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    assert doc["hooks"]["PostToolUse"][0]["matcher"] == "update_plan"
    text = hooks_json.read_text()
    assert install("codex", tmp_path).returncode == 0
    assert hooks_json.read_text() == text
    home = tmp_path / "home"
    assert install("codex", tmp_path, "--user", home=home).returncode == 0
    assert (home / ".codex" / "hooks.json").exists()


def test_uninstall_removes_the_harness_hooks_and_nothing_else(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(THEIRS, indent=4) + "\n")
    for agent in ("claude-code", "codex", "gemini-cli", "copilot"):
        assert install(agent, tmp_path).returncode == 0
    codex = tmp_path / ".codex" / "hooks.json"
    copilot = tmp_path / ".github" / "hooks" / "todo-harness.json"
    gemini = tmp_path / ".gemini" / "settings.json"
    assert codex.exists() and copilot.exists()
    for agent in ("claude-code", "codex", "gemini-cli", "copilot"):
        r = install(agent, tmp_path, verb="uninstall")
        assert r.returncode == 0, r.stderr
        assert b"removed the harness hooks" in r.stdout, (agent, r.stdout)
    doc = json.loads(settings.read_text())
    assert doc["hooks"] == THEIRS["hooks"] and doc["permissions"] == THEIRS["permissions"]
    assert doc["env"] == {"CLAUDE_CODE_ENABLE_TODO_TOOLS": "1"}  # said, and left
    assert not codex.exists() and not copilot.exists()  # files only our hooks were in
    assert "hooks" not in json.loads(gemini.read_text())
    again = install("claude-code", tmp_path, verb="uninstall")
    assert b"nothing of the harness's here" in again.stdout
