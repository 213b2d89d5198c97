"""`harness hook claude-code` driven the way Claude Code drives it: a fresh process per
hook, the payload on stdin, with payloads shaped as its docs describe them and built from
a real Claude Code 2.0.49 transcript."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.agents.claude.hooks import created_task_id
from state.store import Store
from tests.conftest import DATA, harness_subprocess

TRANSCRIPT = DATA / "claude-code-2.0.49-openroad-mcp.jsonl"


def hook(db: Path, payload: Any, *, raw: bytes | None = None,
         env: dict[str, str] | None = None, session: str | None = "default"):
    """One hook call. These tests pin the session with HARNESS_SESSION (``session=None``
    leaves it to the payload: see tests/agents/hooks/test_claude_tasks.py)."""
    stdin = raw if raw is not None else json.dumps(payload).encode()
    pinned = {"HARNESS_SESSION": session} if session else {}
    return harness_subprocess(["hook", "claude-code"], stdin=stdin,
                              env={"HARNESS_DB": str(db), **pinned, **(env or {})})


def base(session: str = "060f3873-8a3f-4c5b-976d-7717d552a4c4", **kw: Any) -> dict[str, Any]:
    return {"session_id": session, "transcript_path": f"/home/u/.claude/projects/p/{session}.jsonl",
            "cwd": "/home/u/p", "permission_mode": "default", **kw}


def post_tool_use(tool: str, tool_input: dict, response: Any = None, *, use_id: str = "",
                  session: str = "060f3873-8a3f-4c5b-976d-7717d552a4c4") -> dict[str, Any]:
    payload = base(session, hook_event_name="PostToolUse", tool_name=tool,
                   tool_input=tool_input, tool_response=response or {})
    if use_id:
        payload["tool_use_id"] = use_id
    return payload


def transcript_calls() -> list[dict[str, Any]]:
    """Every TodoWrite of the real transcript as its PostToolUse payload: the tool_use
    input, and the next user line's toolUseResult as tool_response."""
    lines = [json.loads(x) for x in TRANSCRIPT.read_text().splitlines() if x.strip()]
    results = {}
    for line in lines:
        content = line.get("message", {}).get("content")
        if isinstance(content, list) and isinstance(line.get("toolUseResult"), dict):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results[block["tool_use_id"]] = line["toolUseResult"]
    calls = []
    for line in lines:
        content = line.get("message", {}).get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use" \
                    and block.get("name") == "TodoWrite":
                payload = post_tool_use("TodoWrite", block["input"], results[block["id"]],
                                        use_id=block["id"], session=line["sessionId"])
                payload["cwd"] = line["cwd"]
                calls.append(payload)
    return calls


def stored(db: Path, session: str = "default") -> list:
    with Store.open(str(db)) as s:
        row = s.session_by_name(session)
        assert row is not None
        return sorted(s.todos(row.id), key=lambda t: (t.position, t.num))


def all_events(db: Path) -> list:
    with Store.open(str(db)) as s:
        return s.events()


def hooks_log(tmp_path: Path) -> str:
    path = tmp_path / "data" / "logs" / "hooks.log"
    return path.read_text() if path.exists() else ""


def test_real_transcript_todowrites_through_the_hook(db_path: Path, tmp_path: Path) -> None:
    calls = transcript_calls()
    assert len(calls) == 7
    for i, payload in enumerate(calls):
        r = hook(db_path, payload)
        assert r.returncode == 0, (i, r.stderr)
        if i == 3:
            # The agent's next write after the person's changes is told of them, once.
            notice = json.loads(r.stdout)["hookSpecificOutput"]
            assert notice["hookEventName"] == "PostToolUse"
            assert notice["additionalContext"].splitlines()[1:] == [
                # Named by their place in the last TodoWrite list, when they have one.
                "- item 5 \"Create iteration 1 constraint and re-synthesize\" (t5): "
                "status 'pending' -> 'blocked' ('licence server down') by human",
                "- \"Ask about the PDK licence\" (t8): added by human (pending, high)"]
        else:
            assert r.stdout == b"", (i, r.stdout)
        if i == 2:
            # Meanwhile a person blocks the pending routing step and adds an item.
            for args in (["block", "t5", "--reason", "licence server down"],
                         ["add", "Ask about the PDK licence", "-p", "high"]):
                p = harness_subprocess(args, env={"HARNESS_DB": str(db_path)})
                assert p.returncode == 0, p.stderr
    last = calls[-1]["tool_input"]["todos"]
    todos = stored(db_path)
    agent = [t for t in todos if t.origin == "agent"]
    assert [(t.content, t.active_form) for t in agent] == \
        [(x["content"], x["activeForm"]) for x in last]
    assert [t.status for t in agent] == [x["status"] for x in last]
    # The person's item survives seven full-list writes that never mention it.
    assert [t.content for t in todos if t.origin == "human"] == ["Ask about the PDK licence"]
    events = all_events(db_path)
    todo_events = [e for e in events if e.kind.startswith("todo.") and e.actor != "human"]
    assert {e.actor for e in todo_events} == {"agent:claude-code"}
    assert {e.ref for e in todo_events} <= {c["tool_use_id"] for c in calls}
    # The same delivery twice (a retried hook) changes nothing the second time.
    n = len(events)
    assert hook(db_path, calls[-1]).returncode == 0
    assert len(all_events(db_path)) == n
    assert hooks_log(tmp_path) == ""


def test_blocked_item_is_not_unblocked_by_a_resent_pending(db_path: Path) -> None:
    todos = {"todos": [
        {"content": "Synthesize", "status": "in_progress", "activeForm": "Synthesizing"},
        {"content": "Route", "status": "pending", "activeForm": "Routing"}]}
    assert hook(db_path, post_tool_use("TodoWrite", todos)).returncode == 0
    p = harness_subprocess(["block", "t2", "--reason", "no licence"],
                           env={"HARNESS_DB": str(db_path)})
    assert p.returncode == 0, p.stderr
    todos["todos"][0]["status"] = "completed"
    assert hook(db_path, post_tool_use("TodoWrite", todos)).returncode == 0
    by = {t.content: t for t in stored(db_path)}
    assert by["Synthesize"].status == "completed"
    assert by["Route"].status == "blocked" and by["Route"].blocked_reason == "no licence"
    todos["todos"][1]["status"] = "in_progress"  # starting it does move it on
    assert hook(db_path, post_tool_use("TodoWrite", todos)).returncode == 0
    by = {t.content: t for t in stored(db_path)}
    assert by["Route"].status == "in_progress" and by["Route"].blocked_reason is None


def test_session_start_gives_the_list_back_after_compact_and_restart(db_path: Path) -> None:
    for payload in transcript_calls()[:3]:
        assert hook(db_path, payload).returncode == 0
    outputs = {}
    for source, claude_session in (("compact", "060f3873-8a3f-4c5b-976d-7717d552a4c4"),
                                   ("startup", "a-brand-new-claude-session")):
        r = hook(db_path, base(claude_session, hook_event_name="SessionStart", source=source,
                               model="claude-sonnet-4-5"))
        assert r.returncode == 0, r.stderr
        outputs[source] = json.loads(r.stdout)
    for out in outputs.values():
        spec = out["hookSpecificOutput"]
        assert spec["hookEventName"] == "SessionStart"
        ctx = spec["additionalContext"]
        assert ctx.startswith("Todo list (session default): ")
        for t in stored(db_path):
            assert f"t{t.num} {t.content}" in ctx
    assert outputs["compact"] == outputs["startup"]


def test_session_start_on_an_empty_list_says_nothing(db_path: Path) -> None:
    r = hook(db_path, base(hook_event_name="SessionStart", source="startup"))
    assert r.returncode == 0 and r.stdout == b""


def test_session_start_points_to_the_mcp_server_when_the_todo_tools_may_be_off(
        db_path: Path, tmp_path: Path) -> None:
    """With no CLAUDE_CODE_ENABLE_TODO_TOOLS and the harness server registered, the model
    is told to keep its plan with mcp__harness__todowrite, and how to load it."""
    project = tmp_path / "proj"
    project.mkdir()
    env = {"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": "",
           "CLAUDE_CODE_ENABLE_TODO_TOOLS": ""}
    start = base(hook_event_name="SessionStart", source="startup", cwd=str(project))
    assert hook(db_path, start, env=env).stdout == b""  # no server: nothing to point at
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"harness": {
        "command": "harness", "args": ["mcp", "--agent", "claude-code"]}}}))
    told = json.loads(hook(db_path, start, env=env).stdout)["hookSpecificOutput"]
    assert "If you have no TaskCreate or TodoWrite tool, keep your plan with " \
           "mcp__harness__todowrite" in told["additionalContext"]
    assert 'ToolSearch with query "select:mcp__harness__todowrite"' in \
        told["additionalContext"]
    switched = {**env, "CLAUDE_CODE_ENABLE_TODO_TOOLS": "1"}
    assert hook(db_path, start, env=switched).stdout == b""  # the tools are on


def test_task_tools_create_update_delete_and_depend(db_path: Path) -> None:
    s1 = "11111111-aaaa"
    steps = [
        post_tool_use("TaskCreate", {"subject": "Build vocab mapping",
                                     "description": "top 32k ids over loss-masked tokens",
                                     "activeForm": "Building vocab mapping"},
                      {"task": {"id": "1", "subject": "Build vocab mapping"}}, session=s1),
        post_tool_use("TaskCreate", {"subject": "Train drafter", "description": "Train drafter",
                                     "activeForm": "Training drafter"},
                      "Task #2 created successfully: Train drafter", session=s1),
        post_tool_use("TaskCreate", {"subject": "Scratch idea", "description": "",
                                     "activeForm": "Scratching"},
                      {"taskId": "3"}, session=s1),
        post_tool_use("TaskUpdate", {"taskId": "2", "addBlockedBy": ["1"]}, session=s1),
        post_tool_use("TaskUpdate", {"taskId": "1", "status": "in_progress"}, session=s1),
        post_tool_use("TaskUpdate", {"taskId": "1", "status": "completed"}, session=s1),
        post_tool_use("TaskUpdate", {"taskId": "3", "status": "deleted"}, session=s1),
        post_tool_use("TaskUpdate", {"taskId": "2", "subject": "Train drafter (3 TTT steps)",
                                     "status": "in_progress"}, session=s1),
    ]
    for payload in steps:
        r = hook(db_path, payload)
        assert r.returncode == 0 and r.stderr == b"", r.stderr
    # A duplicate delivery of a TaskCreate does not create a second item.
    assert hook(db_path, steps[0]).returncode == 0
    # After a restart Claude numbers its tasks from 1 again: a new item, not the old one.
    r = hook(db_path, post_tool_use("TaskCreate", {"subject": "Export checkpoint",
                                                   "description": "",
                                                   "activeForm": "Exporting"},
                                    {"task": {"id": "1"}}, session="22222222-bbbb"))
    assert r.returncode == 0
    assert hook(db_path, post_tool_use("TaskUpdate", {"taskId": "1", "status": "in_progress"},
                                       session="22222222-bbbb")).returncode == 0
    todos = {t.content: t for t in stored(db_path)}
    assert set(todos) == {"Build vocab mapping", "Train drafter (3 TTT steps)",
                          "Export checkpoint"}
    assert todos["Build vocab mapping"].status == "completed"
    assert todos["Build vocab mapping"].active_form == "Building vocab mapping"
    train = todos["Train drafter (3 TTT steps)"]
    assert train.status == "in_progress"
    assert train.depends_on == [todos["Build vocab mapping"].num]
    assert todos["Export checkpoint"].status == "in_progress"
    events = all_events(db_path)
    notes = [e.payload["text"] for e in events if e.kind == "todo.noted"]
    assert notes == ["top 32k ids over loss-masked tokens"]  # a description = subject adds none
    removed = [e for e in events if e.kind == "todo.removed"]
    assert [e.payload["content"] for e in removed] == ["Scratch idea"]


def test_task_update_respects_a_persons_block(db_path: Path) -> None:
    s = "33333333-cccc"
    assert hook(db_path, post_tool_use("TaskCreate", {"subject": "Serve with vLLM",
                                                      "description": ""},
                                       {"task": {"id": "1"}}, session=s)).returncode == 0
    p = harness_subprocess(["block", "t1", "--reason", "GPU busy"],
                           env={"HARNESS_DB": str(db_path)})
    assert p.returncode == 0
    assert hook(db_path, post_tool_use("TaskUpdate", {"taskId": "1", "status": "pending"},
                                       session=s)).returncode == 0
    assert stored(db_path)[0].status == "blocked"
    assert hook(db_path, post_tool_use("TaskUpdate", {"taskId": "1", "status": "completed"},
                                       session=s)).returncode == 0
    assert stored(db_path)[0].status == "completed"


def _say(db: Path, route: str, status: str, *, new: bool = False) -> None:
    """Claude says its one item ("Export the drafter") now has ``status``, by ``route``
    (``new``: it creates the item, with TaskCreate on the task route)."""
    s = "44444444-dddd"
    if route == "TodoWrite":
        body = post_tool_use("TodoWrite", {"todos": [
            {"content": "Export the drafter", "status": status, "activeForm": "Exporting"}]},
            session=s)
    elif new:
        body = post_tool_use("TaskCreate", {"subject": "Export the drafter",
                                            "activeForm": "Exporting"},
                             {"task": {"id": "1"}}, session=s)
    else:
        body = post_tool_use("TaskUpdate", {"taskId": "1", "status": status}, session=s)
    r = hook(db, body)
    assert r.returncode == 0 and r.stderr == b"", r.stderr


@pytest.mark.parametrize("route", ["TodoWrite", "TaskUpdate"])
def test_a_persons_cancel_holds_against_either_route(db_path: Path, route: str) -> None:
    """Both routes merge through one use case (harness.agents.agent_write): Claude cannot
    say ``cancelled`` (a cancelled item reads as completed to it), so its resent
    ``pending`` does not undo a person's cancel, nor does its ``completed`` rewrite it."""
    _say(db_path, route, "pending", new=True)
    _say(db_path, route, "in_progress")
    p = harness_subprocess(["cancel", "t1"], env={"HARNESS_DB": str(db_path)})
    assert p.returncode == 0, p.stderr
    for status in ("pending", "completed"):
        _say(db_path, route, status)
        assert [(t.content, t.status) for t in stored(db_path)] == [
            ("Export the drafter", "cancelled")], status
    if route == "TaskUpdate":  # nor does the TaskCompleted event of the same task
        done = base("44444444-dddd", hook_event_name="TaskCompleted", task_id="1",
                    task_subject="Export the drafter")
        assert hook(db_path, done).returncode == 0
        assert stored(db_path)[0].status == "cancelled"
    _say(db_path, route, "in_progress")  # starting it again does move it on
    assert stored(db_path)[0].status == "in_progress"


@pytest.mark.parametrize(("name", "payload", "raw", "logged"), [
    ("malformed JSON", None, b'{"hook_event_name": "PostToolUse", "tool_', "malformed JSON"),
    ("not an object", None, b"[1, 2]", "must be a JSON object"),
    ("empty", None, b"", "empty hook payload"),
    ("unknown status", post_tool_use("TodoWrite", {"todos": [
        {"content": "x", "status": "done", "activeForm": "x"}]}), None, "unknown status 'done'"),
    ("missing todos", post_tool_use("TodoWrite", {"items": []}), None, "no todo list found"),
    ("unknown task", post_tool_use("TaskUpdate", {"taskId": "9", "status": "completed"}), None,
     "task '9' of Claude task list"),
    ("TaskCreate without subject", post_tool_use("TaskCreate", {"description": "d"}), None,
     "TaskCreate: missing subject"),
])
def test_bad_payloads_never_fail_the_agent(db_path: Path, tmp_path: Path, name: str,
                                           payload: Any, raw: bytes | None,
                                           logged: str) -> None:
    seed = post_tool_use("TodoWrite", {"todos": [
        {"content": "keep me", "status": "pending", "activeForm": "keeping"}]})
    assert hook(db_path, seed).returncode == 0
    before = all_events(db_path)
    r = hook(db_path, payload, raw=raw)
    assert r.returncode == 0, name
    assert r.stdout == b""
    assert logged in hooks_log(tmp_path), hooks_log(tmp_path)
    assert len(all_events(db_path)) == len(before)
    assert [t.content for t in stored(db_path)] == ["keep me"]


def test_oversized_payload_and_unreachable_store_exit_zero(db_path: Path,
                                                          tmp_path: Path) -> None:
    big = post_tool_use("TodoWrite", {"todos": [
        {"content": "x" * 1000, "status": "pending", "activeForm": "x"}] * 10})
    r = hook(db_path, big, env={"HARNESS_MAX_PAYLOAD": "5000"})
    assert r.returncode == 0 and "larger than 5000 bytes" in hooks_log(tmp_path)
    not_a_db = tmp_path / "adir"
    not_a_db.mkdir()
    r = hook(not_a_db, post_tool_use("TodoWrite", {"todos": []}))
    assert r.returncode == 0 and "is a directory" in hooks_log(tmp_path)


def test_other_tools_and_events_are_ignored(db_path: Path) -> None:
    for payload in (post_tool_use("Bash", {"command": "ls"}, {"stdout": ""}),
                    base(hook_event_name="Stop", stop_hook_active=False),
                    base(hook_event_name="UserPromptSubmit", prompt="hi")):
        r = hook(db_path, payload)
        assert r.returncode == 0 and r.stdout == b""
    assert not db_path.exists() or [e.kind for e in all_events(db_path)] in ([],
                                                                            ["session.created"])


def test_opencode_event_through_its_hook(db_path: Path, tmp_path: Path) -> None:
    event = {"type": "todo.updated", "properties": {"sessionID": "ses_1", "todos": [
        {"id": "1", "content": "Tokenize", "status": "completed", "priority": "high"},
        {"id": "2", "content": "Train", "status": "in_progress", "priority": "medium"}]}}
    r = harness_subprocess(["hook", "opencode"], stdin=json.dumps(event).encode(),
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0, r.stderr
    assert [(t.content, t.status, t.priority) for t in stored(db_path)] == [
        ("Tokenize", "completed", "high"), ("Train", "in_progress", "medium")]
    r = harness_subprocess(["hook", "opencode"], stdin=b'{"todos": [{"content": 1}]}',
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0 and "missing content" in hooks_log(tmp_path)


@pytest.mark.parametrize(("response", "expected"), [
    ({"task": {"id": "4", "subject": "x"}}, "4"),
    ({"taskId": 7}, "7"),
    ("Task #12 created successfully: Train", "12"),
    ([{"type": "text", "text": "Task #3 created successfully: y"}], "3"),
    ({"content": [{"type": "text", "text": "Task #5 created"}]}, "5"),
    ({}, None),
    (None, None),
])
def test_created_task_id_from_every_response_shape(response: Any, expected: str | None) -> None:
    assert created_task_id(response) == expected


def test_hooks_do_not_load_the_mcp_sdk() -> None:
    """Every agent todo call runs a hook process: it must not pay for the MCP SDK."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    probe = ("import sys, harness.cli.main, harness.agents.claude.hooks, harness.agents.codex.watch; "
             "print(sorted(m for m in ('mcp', 'mcp_types', 'jsonschema', 'anyio') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT)}, check=True)
    assert out.stdout.strip() == "[]"
