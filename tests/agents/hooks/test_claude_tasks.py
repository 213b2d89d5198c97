"""Claude Code's task era, through the real `harness hook claude-code` (a fresh process per
payload, as Claude Code runs it) with payloads recorded in Claude Code's own shapes
(tests/data/hooks/claude-*.json): TaskCreated/TaskCompleted, the Task tools, compaction
and every SessionStart source; which harness session a payload goes to; and Claude's
on-disk task lists (`harness import ~/.claude/tasks/LIST/`, `--follow`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from state.store import Store
from tests.conftest import DATA, ROOT, harness_subprocess

HOOKS = DATA / "hooks"
TASK_LIST = DATA / "claude-tasks" / "eagle3-drafter"


def payload(name: str, **changes: Any) -> dict[str, Any]:
    data = json.loads((HOOKS / f"claude-{name}.json").read_text())
    data.update(changes)
    return data


def hook(db: Path, body: dict[str, Any], *, env: dict[str, str] | None = None,
         cwd: Path | None = None):
    r = harness_subprocess(["hook", "claude-code"], stdin=json.dumps(body).encode(),
                           env={"HARNESS_DB": str(db), **(env or {})}, cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert b"logged to" not in r.stderr, r.stderr
    return r


def session(db: Path, name: str) -> tuple[list, list]:
    with Store.open(str(db)) as s:
        row = s.session_by_name(name)
        assert row is not None, [x.name for x in s.sessions()]
        todos = sorted(s.todos(row.id), key=lambda t: (t.position, t.num))
        return todos, s.events(row.id)


def test_task_tools_and_task_events_make_one_list(db_path: Path) -> None:
    # TaskCreated fires as the task is created, PostToolUse after: one task, not two.
    for name in ("task-created", "post-tool-use-task-create", "post-tool-use-task-create-2",
                 "post-tool-use-task-update-blocked-by", "post-tool-use-task-update-in-progress",
                 "task-completed"):
        hook(db_path, payload(name))
    todos, events = session(db_path, "eagle3")  # the project directory, /srv/eagle3
    assert [(t.num, t.content, t.status, t.depends_on) for t in todos] == [
        (1, "Regenerate 10K samples with <think> kept", "completed", []),
        (2, "Build the vocab mapping (d2t/t2d)", "pending", [1])]
    # Fix 1: TaskCreated (no activeForm) comes first; PostToolUse's activeForm still lands.
    assert todos[0].active_form == "Regenerating 10K samples"
    assert todos[1].active_form == "Building the vocab mapping"
    notes = [e.payload["text"] for e in events if e.kind == "todo.noted"]
    assert notes == ["Reasoning goes back in as <think>...</think> before the answer",
                     "32K draft vocab from the regenerated set"]
    assert {e.actor for e in events if e.kind.startswith("todo.")} == {"agent:claude-code"}


def test_a_compaction_is_one_cut_in_the_history_and_the_list_comes_back(db_path: Path) -> None:
    for name in ("task-created", "post-tool-use-task-create-2"):
        hook(db_path, payload(name))
    # What Claude Code sends around one auto-compaction (print mode: all three).
    hook(db_path, payload("pre-compact-auto"))
    back = hook(db_path, payload("session-start-compact"))
    hook(db_path, payload("post-compact-auto"))
    out = json.loads(back.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == "SessionStart"
    ctx = out["additionalContext"]
    assert ctx.startswith("Todo list (session eagle3): 0/2 completed. Kept by todo-harness")
    assert "[ ] t1 Regenerate 10K samples with <think> kept (medium)" in ctx
    assert "[ ] t2 Build the vocab mapping (d2t/t2d) (medium)" in ctx
    _, events = session(db_path, "eagle3")
    cuts = [e for e in events if e.kind == "agent.context"]
    assert [(c.payload["cut"], c.payload.get("trigger"), c.payload["hook"]) for c in cuts] == [
        ("compact", "auto", "PreCompact")]
    assert cuts[0].payload["agent_session"] == payload("pre-compact-auto")["session_id"]
    # Replay shows where the context was cut, between the list's own events.
    log = harness_subprocess(["log", "--session", "eagle3"], env={"HARNESS_DB": str(db_path)})
    assert log.returncode == 0, log.stderr
    assert b"context cut: compact (auto) of claude-code session 5b7c1e20" in log.stdout


def test_clear_resume_and_startup_each_give_the_list_back(db_path: Path) -> None:
    hook(db_path, payload("task-created"))
    for name, cut in (("session-start-clear", "clear"), ("session-start-resume", "resume"),
                      ("session-start-startup", "startup")):
        r = hook(db_path, payload(name))
        ctx = json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
        assert "t1 Regenerate 10K samples with <think> kept" in ctx, cut
    _, events = session(db_path, "eagle3")
    assert [e.payload["cut"] for e in events if e.kind == "agent.context"] == [
        "clear", "resume", "startup"]


def test_an_empty_list_records_the_start_and_prints_nothing(db_path: Path) -> None:
    r = hook(db_path, payload("session-start-startup"))
    assert r.stdout == b""
    _, events = session(db_path, "eagle3")
    assert [e.kind for e in events] == ["session.created", "agent.context"]


def test_a_forked_session_updates_the_tasks_it_inherited(db_path: Path) -> None:
    hook(db_path, payload("task-created"))
    hook(db_path, payload("post-tool-use-task-create-2"))
    fork = "77aa77aa-0000-4000-8000-000000000001"  # --fork-session: a new session id
    hook(db_path, payload("session-start-resume", session_id=fork))
    hook(db_path, payload("post-tool-use-task-update-in-progress", session_id=fork))
    todos, _ = session(db_path, "eagle3")
    assert [(t.num, t.status) for t in todos] == [(1, "in_progress"), (2, "pending")]
    # Once the new session has tasks of its own, its ids are its own.
    hook(db_path, payload("post-tool-use-task-create", session_id=fork,
                          tool_input={"subject": "Train the drafter"},
                          tool_response={"task": {"id": "1"}}))
    todos, _ = session(db_path, "eagle3")
    assert [t.content for t in todos][-1] == "Train the drafter"


def test_a_shared_task_list_is_one_session_across_claude_sessions(db_path: Path) -> None:
    env = {"CLAUDE_CODE_TASK_LIST_ID": "eagle3-drafter"}
    hook(db_path, payload("task-created"), env=env)
    # Another Claude session on the same list (a teammate, or after /clear) completes it.
    other = "0b0b0b0b-1111-4222-8333-444444444444"
    hook(db_path, payload("task-completed", session_id=other), env=env)
    todos, _ = session(db_path, "eagle3-drafter")
    assert [(t.content, t.status) for t in todos] == [
        ("Regenerate 10K samples with <think> kept", "completed")]
    # The list on disk is the same list: importing it adds the rest, duplicates nothing.
    r = harness_subprocess(["import", str(TASK_LIST)], env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0, r.stderr
    todos, _ = session(db_path, "eagle3-drafter")
    assert [t.content for t in todos] == [
        "Regenerate 10K samples with <think> kept", "Build the vocab mapping (d2t/t2d)",
        "Dump hidden states at layers 2, N/2, N-3", "Train the drafter"]


def test_which_session_a_payload_goes_to(db_path: Path, tmp_path: Path) -> None:
    # HARNESS_SESSION, when no shared task list is set.
    hook(db_path, payload("task-created"), env={"HARNESS_SESSION": "pinned"})
    assert session(db_path, "pinned")[0]
    # The list id wins over HARNESS_SESSION: the list is the piece of work.
    hook(db_path, payload("task-created"), env={"HARNESS_SESSION": "pinned",
                                                 "CLAUDE_CODE_TASK_LIST_ID": "the-list"})
    assert session(db_path, "the-list")[0]
    # --session wins over both.
    r = harness_subprocess(["hook", "claude-code", "--session", "explicit"],
                           stdin=json.dumps(payload("task-created")).encode(),
                           env={"HARNESS_DB": str(db_path), "CLAUDE_CODE_TASK_LIST_ID": "x"})
    assert r.returncode == 0 and session(db_path, "explicit")[0]
    # A project with its own store (`harness init`): that store's current session.
    project = tmp_path / "proj"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_DB"}
    subprocess.run([sys.executable, "-m", "harness", "init"], cwd=project, check=True,
                   env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True)
    r = subprocess.run([sys.executable, "-m", "harness", "hook", "claude-code"],
                       input=json.dumps(payload("task-created", cwd=str(project))).encode(),
                       cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT),
                                          "CLAUDE_PROJECT_DIR": str(project)},
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert session(project / ".harness" / "state.db", "default")[0]


def _task_files(directory: Path) -> Path:
    copy = directory / "eagle3-drafter"
    shutil.copytree(TASK_LIST, copy)
    return copy


def test_importing_a_task_list_maps_blocks_to_dependencies(db_path: Path, tmp_path: Path,
                                                          cli) -> None:
    tasks = _task_files(tmp_path)
    r = cli(["import", str(tasks)])
    assert r.code == 0, r.err
    assert "4 tasks into session eagle3-drafter (new): 4 changed" in r.out
    todos, events = session(db_path, "eagle3-drafter")
    assert [(t.num, t.status, t.depends_on, t.active_form) for t in todos] == [
        (1, "completed", [], "Regenerating 10K samples"),
        (2, "in_progress", [1], "Building the vocab mapping"),
        (3, "pending", [1], "Dumping hidden states"),
        (4, "pending", [2, 3], "Training the drafter")]
    assert cli(["import", str(tasks)]).out.endswith("already in sync\n")
    assert len(session(db_path, "eagle3-drafter")[1]) == len(events)
    # Claude marks task 2 done, adds 5 blocked by 4, deletes 3; a file it is writing
    # (empty) is waited for, one it broke is skipped and said.
    two = json.loads((tasks / "2.json").read_text())
    (tasks / "2.json").write_text(json.dumps({**two, "status": "completed"}))
    (tasks / "5.json").write_text(json.dumps({"id": "5", "subject": "Benchmark with vLLM",
                                              "status": "pending", "blockedBy": ["4"],
                                              "blocks": []}))
    (tasks / "3.json").unlink()
    (tasks / "6.json").write_text("{not json")
    r = cli(["import", str(tasks)])
    assert r.code == 0, r.err
    assert "6.json: not JSON" in r.out
    todos, events = session(db_path, "eagle3-drafter")
    assert [(t.num, t.status, t.depends_on) for t in todos] == [
        (1, "completed", []), (2, "completed", [1]), (4, "pending", [2]), (5, "pending", [4])]
    removed = [e for e in events if e.kind == "todo.removed"]
    assert [(e.todo_id, e.payload["reason"]) for e in removed] == [
        (3, "deleted in Claude Code (task list eagle3-drafter)")]


def test_follow_keeps_the_list_in_sync_until_ctrl_c(db_path: Path, tmp_path: Path) -> None:
    tasks = _task_files(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "import", "--follow",
                             "--interval", "0.1", str(tasks)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert b"4 changed" in proc.stdout.readline()  # type: ignore[union-attr]
        four = json.loads((tasks / "4.json").read_text())
        time.sleep(0.05)  # a new mtime, even on coarse clocks
        (tasks / "4.json").write_text(json.dumps({**four, "status": "in_progress"}))
        assert b"1 changed" in proc.stdout.readline()  # type: ignore[union-attr]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode().splitlines()[-1] == "error: interrupted"
    todos, _ = session(db_path, "eagle3-drafter")
    assert todos[-1].status == "in_progress"


@pytest.mark.parametrize("args,message", [
    (["--follow", "a.jsonl"], "--follow takes one directory: a Claude Code task list"),
])
def test_follow_needs_a_task_list(db_path: Path, tmp_path: Path, cli, args: list[str],
                                  message: str) -> None:
    (tmp_path / "a.jsonl").write_text("{}\n")
    r = cli(["import", *[str(tmp_path / a) if a.endswith(".jsonl") else a for a in args]])
    assert r.code == 2 and message in r.err and len(r.err.strip().splitlines()) == 1


def test_a_list_written_after_a_cut_removes_nothing_it_left_out(db_path: Path) -> None:
    """Claude Code's users lose todos after compaction and /clear: the new context's
    first TodoWrite lacks items the old one had. Before a cut an omission removes (the
    agent knew the item); the first write after one does not (it may not have)."""
    def todowrite(items: list[str], **changes: Any) -> None:
        body = payload("post-tool-use-todowrite-30", **changes)
        body["tool_input"] = {"todos": [{"content": c, "status": "pending", "activeForm": c}
                                        for c in items]}
        hook(db_path, body)

    todowrite(["Regenerate the samples", "Build the vocab", "Train the drafter"])
    todowrite(["Regenerate the samples", "Build the vocab"])  # the agent drops one
    assert [t.content for t in session(db_path, "eagle3")[0]] == [
        "Regenerate the samples", "Build the vocab"]
    todowrite(["Regenerate the samples", "Build the vocab", "Benchmark it"])
    hook(db_path, payload("pre-compact-auto"))
    todowrite(["Build the vocab"])  # what survived the summary
    todos, events = session(db_path, "eagle3")
    assert [t.content for t in todos] == ["Regenerate the samples", "Build the vocab",
                                          "Benchmark it"]
    assert len([e for e in events if e.kind == "todo.created"]) == 4  # no duplicates
    # In the new context the agent knows what it wrote since: taking an item up and
    # dropping it again removes it; the one it never wrote stays.
    todowrite(["Regenerate the samples", "Build the vocab"])
    todowrite(["Build the vocab"])
    assert [t.content for t in session(db_path, "eagle3")[0]] == ["Build the vocab",
                                                                  "Benchmark it"]
