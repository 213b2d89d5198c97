"""`harness hook gemini-cli install`: the hooks merged into Gemini CLI's settings.json
(other settings kept, idempotent, `--dry-run` a diff), the task tracker turned on with a
line that says so, or with `--no-task-tools` the harness MCP server for a model that has
no write_todos; and the installed hook runs as Gemini CLI runs it (`sh -c COMMAND`, the
payload on stdin)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from state.store import Store
from tests.conftest import ROOT, harness_subprocess

THEIRS = {
    "model": {"name": "gemini-3.8-flash"},
    "hooks": {"BeforeTool": [{"matcher": "run_shell_command",
                              "hooks": [{"type": "command", "command": "./audit.sh"}]}]},
    "mcpServers": {"github": {"command": "gh-mcp", "args": []}},
}


def install(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {"HOME": str(cwd / "home"), "GEMINI_CLI_HOME": str(cwd / "home")}
    r = harness_subprocess(["hook", "gemini-cli", "install", *args], cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr
    return r


def test_install_keeps_other_settings_turns_the_tracker_on_and_is_idempotent(
        tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(THEIRS, indent=2) + "\n")
    before = settings.read_text()
    dry = install(tmp_path, "--dry-run").stdout.decode()
    assert dry.startswith(f"--- {settings}\n+++ {settings}\n") and '"taskTracker": true' in dry
    assert settings.read_text() == before
    out = install(tmp_path).stdout.decode()
    assert f"{settings}: added the harness hooks (SessionStart, BeforeAgent, AfterTool, " \
           "PreCompress); set experimental.taskTracker" in out
    assert "note: Gemini CLI's task tracker goes on (experimental.taskTracker)" in out
    assert f"trust {tmp_path} when Gemini CLI asks" in out
    doc = json.loads(settings.read_text())
    assert doc["model"] == THEIRS["model"] and doc["mcpServers"] == THEIRS["mcpServers"]
    assert doc["experimental"] == {"taskTracker": True}
    hooks = doc["hooks"]
    assert hooks["BeforeTool"] == THEIRS["hooks"]["BeforeTool"]
    for event in ("SessionStart", "BeforeAgent", "AfterTool", "PreCompress"):
        [group] = hooks[event]
        assert "matcher" not in group  # every tool, every source and trigger
        assert group["hooks"][0]["name"] == "todo-harness"
        assert group["hooks"][0]["command"].endswith("hook gemini-cli")
    after = settings.read_text()
    again = install(tmp_path).stdout.decode()
    assert f"{settings}: already up to date" in again and "taskTracker" not in again
    assert settings.read_text() == after


def test_no_task_tools_gives_a_model_without_write_todos_the_mcp_server(
        tmp_path: Path) -> None:
    out = install(tmp_path, "--no-task-tools", "--user").stdout.decode()
    settings = tmp_path / "home" / ".gemini" / "settings.json"
    assert f"{settings}: added the harness hooks" in out and "mcpServers.harness" in out
    assert "when Gemini CLI asks" not in out  # the user's settings need no trusted folder
    doc = json.loads(settings.read_text())
    assert "experimental" not in doc
    server = doc["mcpServers"]["harness"]
    # It writes as the hooks do, to their session, and serves only the todo tools.
    assert server["args"][-5:] == ["mcp", "--agent", "gemini-cli", "--tools",
                                   "todowrite,todoread,todo_update"]
    assert "hook" not in server["args"]
    install(tmp_path, "--no-task-tools", "--user")
    assert list(json.loads(settings.read_text())["mcpServers"]) == ["harness"]  # not twice


def test_no_task_tools_on_a_gemini_2_model_or_with_the_tracker_on(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"model": {"name": "gemini-2.5-pro"}}))
    out = install(tmp_path, "--no-task-tools").stdout.decode()
    assert "gemini-2.5-pro has Gemini CLI's write_todos" in out
    assert "mcpServers" not in json.loads(settings.read_text())
    settings.write_text(json.dumps({"experimental": {"taskTracker": True}}))
    out = install(tmp_path, "--no-task-tools").stdout.decode()
    assert "the task tracker is on in these settings already" in out
    assert "mcpServers" not in json.loads(settings.read_text())


def test_a_trusted_folder_needs_no_note(tmp_path: Path) -> None:
    (tmp_path / "home" / ".gemini").mkdir(parents=True)
    (tmp_path / "home" / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(tmp_path / "x"): "TRUST_PARENT"}))
    assert "when Gemini CLI asks" not in install(tmp_path).stdout.decode()


def test_settings_we_cannot_read_are_left_alone(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{\n  // my comment\n  "model": {}\n}\n')
    env = {"HOME": str(tmp_path / "home"), "GEMINI_CLI_HOME": str(tmp_path / "home")}
    r = harness_subprocess(["hook", "gemini-cli", "install"], cwd=tmp_path, env=env)
    assert r.returncode != 0
    assert f"{settings}: not valid JSON" in r.stderr.decode()
    assert b"Traceback" not in r.stderr
    assert settings.read_text() == '{\n  // my comment\n  "model": {}\n}\n'


def test_the_installed_hook_runs_as_gemini_cli_runs_it(tmp_path: Path) -> None:
    cmd = f"{sys.executable} -m harness hook gemini-cli"
    install(tmp_path, "--command", cmd)
    doc = json.loads((tmp_path / ".gemini" / "settings.json").read_text())
    command = doc["hooks"]["AfterTool"][0]["hooks"][0]["command"]
    db = tmp_path / "state.db"
    payload = {"session_id": "s1", "transcript_path": "", "cwd": str(tmp_path),
               "hook_event_name": "AfterTool", "timestamp": "2026-12-04T18:12:13.000Z",
               "tool_name": "write_todos",
               "tool_input": {"todos": [{"description": "Train the drafter",
                                         "status": "in_progress"}]},
               "tool_response": {"llmContent": "Successfully updated the todo list.",
                                 "returnDisplay": {"todos": []}}}
    r = subprocess.run(["sh", "-c", command], input=json.dumps(payload).encode(),
                       capture_output=True, cwd=tmp_path, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                            "HOME": str(tmp_path / "home"), "HARNESS_DB": str(db),
                            "HARNESS_DATA_DIR": str(tmp_path / "data")})
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    with Store.open(str(db)) as s:
        row = s.session_by_name(tmp_path.name)  # the project directory's name
        assert row is not None
        assert [(t.content, t.status) for t in s.todos(row.id)] == [
            ("Train the drafter", "in_progress")]
