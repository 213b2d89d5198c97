"""People's changes written into Claude Code's own task files (harness/agents/claude/task_files.py)
through the real `harness hook claude-code` (PreToolUse of TaskList), and completed tasks
kept when Claude Code drops their files. The real Claude Code reading those files is in
tests/agents/real/test_claude_code.py."""

from __future__ import annotations

import json
from pathlib import Path

from tests.agents.hooks.test_claude_tasks import hook, payload, session
from tests.conftest import harness_subprocess

LIST = "5b7c1e20-41aa-4e0b-9d3f-2c6a0f8e9b11"  # the session id of the recorded payloads


def _claude_made_two_tasks(db: Path, config: Path) -> Path:
    """What Claude Code leaves after two TaskCreate calls: two files, and our hooks' map."""
    tasks = config / "tasks" / LIST
    tasks.mkdir(parents=True)
    (tasks / ".lock").touch()
    for tid, name in (("1", "post-tool-use-task-create"), ("2", "post-tool-use-task-create-2")):
        body = payload(name)
        (tasks / f"{tid}.json").write_text(json.dumps({
            "id": tid, "subject": body["tool_input"]["subject"],
            "description": body["tool_input"]["description"],
            "activeForm": body["tool_input"]["activeForm"], "status": "pending",
            "blocks": [], "blockedBy": []}, indent=2))
        hook(db, body, env={"CLAUDE_CONFIG_DIR": str(config)})
    return tasks


def person(db: Path, *args: str, config: Path | None = None) -> None:
    """A person's command, from a shell that sees the same Claude config directory (or,
    ``config=None``, another one: the write-back then waits for Claude's next hook)."""
    env = {"HARNESS_DB": str(db),
           "CLAUDE_CONFIG_DIR": str(config or db.parent / "elsewhere")}
    r = harness_subprocess(["-s", "eagle3", *args], env=env)
    assert r.returncode == 0, r.stderr


def test_a_persons_change_goes_into_the_task_file_at_once(db_path: Path,
                                                           tmp_path: Path) -> None:
    config = tmp_path / "claude"
    tasks = _claude_made_two_tasks(db_path, config)
    person(db_path, "edit", "t1", "Regenerate 20K samples", config=config)
    one = json.loads((tasks / "1.json").read_text())
    assert (one["subject"], one["status"]) == ("Regenerate 20K samples", "pending")
    assert one["description"].startswith("Reasoning goes back in")  # the rest kept
    person(db_path, "start", "t2", config=config)
    assert json.loads((tasks / "2.json").read_text())["status"] == "in_progress"
    assert sorted(p.name for p in tasks.iterdir()) == [".lock", "1.json", "2.json"]


def test_a_persons_change_is_written_into_the_task_file_before_tasklist(
        db_path: Path, tmp_path: Path) -> None:
    config = tmp_path / "claude"
    tasks = _claude_made_two_tasks(db_path, config)
    person(db_path, "edit", "t1", "Regenerate 20K samples")
    person(db_path, "block", "t2", "--reason", "no GPU quota")
    # Meanwhile Claude itself changed task 2 (a call our hooks have not seen yet).
    two = json.loads((tasks / "2.json").read_text())
    (tasks / "2.json").write_text(json.dumps({**two, "status": "in_progress"}))
    before = sorted(p.name for p in tasks.iterdir())
    pre = payload("post-tool-use-task-create", hook_event_name="PreToolUse",
                  tool_name="TaskList", tool_input={})
    pre.pop("tool_response")
    r = hook(db_path, pre, env={"CLAUDE_CONFIG_DIR": str(config)})
    assert r.stdout == b""  # PreToolUse says nothing; the notice comes after the tool
    one = json.loads((tasks / "1.json").read_text())
    assert one["subject"] == "Regenerate 20K samples"  # the person's edit, for TaskList
    assert one["description"].startswith("Reasoning goes back in")  # the rest kept
    assert one["activeForm"] == "Regenerating 10K samples"
    # Claude's newer word on task 2 wins: its file is left as Claude wrote it.
    assert json.loads((tasks / "2.json").read_text())["status"] == "in_progress"
    assert sorted(p.name for p in tasks.iterdir()) == before  # no temp file, nothing new
    # Writing it again changes nothing (the map now says what the file says).
    mtime = (tasks / "1.json").stat().st_mtime_ns
    hook(db_path, pre, env={"CLAUDE_CONFIG_DIR": str(config)})
    assert (tasks / "1.json").stat().st_mtime_ns == mtime
    # A person's "done" reaches the file as well.
    person(db_path, "done", "t1")
    hook(db_path, pre, env={"CLAUDE_CONFIG_DIR": str(config)})
    assert json.loads((tasks / "1.json").read_text())["status"] == "completed"
    # The notice after the tool tells what the file cannot (the block and its reason).
    post = payload("post-tool-use-task-create", tool_name="TaskList", tool_input={},
                   tool_response={"tasks": []})
    told = json.loads(hook(db_path, post, env={"CLAUDE_CONFIG_DIR": str(config)}).stdout)
    text = told["hookSpecificOutput"]["additionalContext"]
    assert "#2 \"Build the vocab mapping (d2t/t2d)\" (t2): status 'pending' -> 'blocked' " \
           "('no GPU quota') by human" in text
    assert "#1 \"Regenerate 10K samples with <think> kept\" (t1): content -> 'Regenerate " \
           "20K samples'; status 'pending' -> 'completed' by human" in text


def test_a_task_file_claude_dropped_is_never_made_again_and_the_task_is_kept(
        db_path: Path, tmp_path: Path, cli) -> None:
    config = tmp_path / "claude"
    tasks = _claude_made_two_tasks(db_path, config)
    person(db_path, "done", "t1")
    (tasks / "1.json").unlink()  # Claude Code drops a finished task's file
    person(db_path, "edit", "t1", "Regenerated 10K samples")
    pre = payload("post-tool-use-task-create", hook_event_name="PreToolUse",
                  tool_name="TaskList", tool_input={})
    hook(db_path, pre, env={"CLAUDE_CONFIG_DIR": str(config)})
    assert not (tasks / "1.json").exists()  # never made again
    # The importer (harness import --follow) keeps the completed task; a pending one whose
    # file went is deleted in Claude Code.
    (tasks / "2.json").unlink()
    r = cli(["import", "--session", "eagle3", str(tasks)])
    assert r.code == 0, r.err
    todos, _ = session(db_path, "eagle3")
    assert [(t.num, t.status) for t in todos] == [(1, "completed")]
    shown = harness_subprocess(["-s", "eagle3", "show", "t1"],
                               env={"HARNESS_DB": str(db_path),
                                    "CLAUDE_CONFIG_DIR": str(config)})
    assert f"claude code: task 1 of list {LIST} (Claude Code dropped its file; kept here)" \
        in shown.stdout.decode()
    as_json = harness_subprocess(["-s", "eagle3", "show", "t1", "--json"],
                                 env={"HARNESS_DB": str(db_path),
                                      "CLAUDE_CONFIG_DIR": str(config)})
    assert json.loads(as_json.stdout)["claude_task"] == {
        "list": LIST, "task": "1", "file": str(tasks / "1.json"), "dropped": True}
