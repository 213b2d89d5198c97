"""The real Claude Code (2.1.197, from npm) against a scripted model: its task tools and
TodoWrite through the hooks `harness hook claude-code install` writes, the harness MCP
server through --mcp-config, /compact, --resume, and a person's change in between.

What is asserted is the store, Claude's own task files, and the request bodies Claude
Code sends to the model: those are what the agent sees."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agents.real.anthropic_server import AnthropicServer, Reply, Request, ToolCall
from tests.agents.real.claude_run import PROJECT, ClaudeProject

pytestmark = [pytest.mark.real_agent, pytest.mark.slow]

Step = tuple[Callable[[], None] | None, Reply]


class Steps:
    """The model's turns, in order: a step may first make a person's change (the model is
    "thinking" while it lands). A compaction's summary request is answered apart.
    ``seen[k]`` is the request step ``k`` answered."""

    def __init__(self, steps: list[Step], *, wait_for: str | None = None):
        self.steps = steps
        self.seen: dict[int, Request] = {}
        self.wait_for = wait_for
        self.waits = 0

    def __call__(self, req: Request, before: list[Request]) -> Reply:
        if not req.agent_turn:
            return Reply(text="A title.")
        if req.compaction:
            return Reply(text="<summary>The drafter work was planned as tasks.</summary>")
        if self.wait_for and self.wait_for not in req.tools and self.waits < 20:
            # `claude -p` asks the model before its MCP servers are connected: a harmless
            # turn (not a step) until the server's tools are offered.
            self.waits += 1
            time.sleep(0.5)
            return call("TaskList")
        k = len(self.seen)
        self.seen[k] = req
        if k >= len(self.steps):
            return Reply(text="done.")
        change, reply = self.steps[k]
        if change is not None:
            change()
        return reply


def call(name: str, **args: object) -> Reply:
    return Reply(calls=[ToolCall(name, dict(args))])


def reminders(req: Request) -> str:
    """The system reminders of the last user message (where hook context goes), as the
    model reads them (decoded)."""
    return Request("", {"messages": req.after_last_turn()}).plain


def test_tasks_a_persons_edits_compact_and_resume(tmp_path: Path) -> None:
    holder: list[ClaudeProject] = []

    def person_edits() -> None:
        holder[0].person("prio", "t2", "high")
        holder[0].person("edit", "t1", "Train the drafter, 3 epochs")

    steps = Steps([
        (None, call("TaskCreate", subject="Train the drafter", description="3 epochs on 10K",
                    activeForm="Training the drafter")),
        (None, call("TaskCreate", subject="Write the report", description="with numbers",
                    activeForm="Writing the report")),
        (None, call("TaskUpdate", taskId="1", status="in_progress")),
        (person_edits, call("TaskList")),
        (None, Reply(text="Carrying on with the drafter.")),
        (None, call("TaskList")),  # after /compact and --resume
        (None, Reply(text="done.")),
    ])
    with AnthropicServer(steps) as api:
        api.dump_to = tmp_path / "requests.json"
        claude = ClaudeProject(tmp_path, api)
        holder.append(claude)
        first = claude.run("Plan the drafter work as tasks.")
        assert first.code == 0, first.stderr
        sid = first.session_id
        # The person's edit is in Claude's own task file, and TaskList (which reads the
        # files afresh) showed it; the next request also carries the notice.
        after_edit = steps.seen[4]
        assert after_edit.tool_results() == [
            "#1 [in_progress] Train the drafter, 3 epochs\n#2 [pending] Write the report"]
        told = reminders(after_edit)
        assert "todo-harness: the todo list changed since you last saw it" in told
        # Each item named as Claude knows it: its task id, and its text.
        assert "#2 \"Write the report\" (t2): priority 'medium' -> 'high' by human" in told
        assert claude.task_file(sid, "1")["subject"] == "Train the drafter, 3 epochs"
        assert claude.task_file(sid, "1")["status"] == "in_progress"
        # Fix 1: TaskCreated came first without activeForm; PostToolUse's still landed.
        todos = claude.todos()
        assert [(t.num, t.content, t.status, t.priority, t.active_form) for t in todos] == [
            (1, "Train the drafter, 3 epochs", "in_progress", "medium", "Training the drafter"),
            (2, "Write the report", "pending", "high", "Writing the report")]

        compact = claude.run("/compact", resume=sid)
        assert compact.code == 0, compact.stderr
        claude.person("add", "Check the acceptance length", "-p", "high")  # in between
        resumed = claude.run("Carry on.", resume=sid)
        assert resumed.code == 0, resumed.stderr
        # The first request after the cut and the resume holds the whole list, the
        # person's new item and priority included.
        back = steps.seen[5].text
        assert "[>] t1 Train the drafter, 3 epochs (medium)" in back
        assert "[ ] t2 Write the report (high)" in back
        assert "[ ] t3 Check the acceptance length (high)" in back
        assert "The drafter work was planned as tasks." in back  # the compaction's summary
        assert steps.seen[6].tool_results()[0].startswith("#1 [in_progress] Train the drafter")
    with claude_store(claude) as events:
        cuts = [e.payload["cut"] for e in events if e.kind == "agent.context"]
    assert cuts[:1] == ["startup"] and "compact" in cuts and cuts[-1] == "resume"
    assert claude.hook_log() == ""
    assert api.errors == [] and len(api.requests) < api.max_requests


def claude_store(claude: ClaudeProject):  # type: ignore[no-untyped-def]
    from contextlib import contextmanager

    from state.store import Store

    @contextmanager
    def events():  # type: ignore[no-untyped-def]
        with Store.open(str(claude.db)) as s:
            row = s.session_by_name(PROJECT)
            assert row is not None
            yield s.events(row.id)

    return events()


def test_todowrite_era_a_persons_priority_in_the_next_request(tmp_path: Path) -> None:
    holder: list[ClaudeProject] = []

    def person() -> None:
        holder[0].person("prio", "t2", "high")
        holder[0].person("add", "Check the acceptance length", "-p", "high")

    def todo(content: str, status: str) -> dict[str, str]:
        return {"content": content, "status": status, "activeForm": content + "..."}

    steps = Steps([
        (None, call("TodoWrite", todos=[todo("Train the drafter", "in_progress"),
                                        todo("Write the report", "pending")])),
        (person, call("TodoWrite", todos=[todo("Train the drafter", "completed"),
                                          todo("Write the report", "in_progress")])),
        (None, Reply(text="done.")),
    ])
    with AnthropicServer(steps) as api:
        api.dump_to = tmp_path / "requests.json"
        claude = ClaudeProject(tmp_path, api, CLAUDE_CODE_ENABLE_TASKS="0")
        holder.append(claude)
        r = claude.run("Plan the drafter work.")
        assert r.code == 0, r.stderr
        assert "TodoWrite" in steps.seen[0].tools and "TaskCreate" not in steps.seen[0].tools
        told = reminders(steps.seen[2])
        # Named by its place in the list the last TodoWrite sent, and its text.
        assert "item 2 \"Write the report\" (t2): priority 'medium' -> 'high' by human" in told
        assert "\"Check the acceptance length\" (t3): added by human (pending, high)" in told
        assert "priority" not in reminders(steps.seen[1])  # nothing to tell before it
    todos = claude.todos()
    assert [(t.content, t.status, t.priority, t.origin) for t in todos] == [
        ("Train the drafter", "completed", "medium", "agent"),
        ("Write the report", "in_progress", "high", "agent"),
        ("Check the acceptance length", "pending", "high", "human")]
    assert claude.hook_log() == ""


def test_mcp_server_through_mcp_config(tmp_path: Path) -> None:
    holder: list[ClaudeProject] = []
    steps = Steps([
        (None, call("mcp__harness__todowrite", todos=[
            {"content": "Train the drafter", "status": "in_progress", "priority": "medium"},
            {"content": "Write the report", "status": "pending", "priority": "medium"}])),
        (lambda: holder[0].person("prio", "t1", "high"), call("mcp__harness__todoread")),
        (lambda: holder[0].person("block", "t2", "--reason", "no GPU quota"),
         call("mcp__harness__pipeline_status")),
        (None, Reply(text="done.")),
    ], wait_for="mcp__harness__todowrite")
    with AnthropicServer(steps) as api:
        api.dump_to = tmp_path / "requests.json"
        claude = ClaudeProject(tmp_path, api)
        holder.append(claude)
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"harness": {
            "command": sys.executable, "args": ["-m", "harness", "-s", PROJECT, "mcp"],
            "env": {k: claude.env[k] for k in ("PYTHONPATH", "HARNESS_DB",
                                               "HARNESS_DATA_DIR")}}}}))
        r = claude.run("Plan the drafter work.", "--mcp-config", str(config),
                       "--strict-mcp-config", "--allowedTools", "mcp__harness")
        assert r.code == 0, r.stderr
        assert "mcp__harness__todowrite" in steps.seen[0].tools
        wrote = steps.seen[1].tool_results()[0]
        assert '"ids"' in wrote and "t1" in wrote
        # Claude Code shows the model an MCP answer's structured content, as JSON.
        read = json.loads(steps.seen[2].tool_results()[0])  # todoread: the list itself
        assert [(t["id"], t["priority"]) for t in read["todos"]] == [("t1", "high"),
                                                                     ("t2", "medium")]
        status = json.loads(steps.seen[3].tool_results()[0])  # the next answer: the notice
        assert status["notice"].startswith(
            "todo-harness: the todo list changed since you last saw it")
        assert "\"Write the report\" (t2): status 'pending' -> 'blocked' ('no GPU quota') " \
            "by human" in status["notice"]
        assert "t1 priority" not in status["notice"]  # told once: todoread showed it
    todos = claude.todos()
    assert [(t.content, t.status, t.priority) for t in todos] == [
        ("Train the drafter", "in_progress", "high"),
        ("Write the report", "blocked", "medium")]
