"""The real Claude Code from npm, on each version tests/agents/real/npm.py names (the
newest, 2.1.332, and 2.1.197), against a scripted model: its task tools and TodoWrite
through what `harness hook claude-code install` writes (hooks, the todo-tools switch),
the harness MCP server that install registers when the todo tools stay off, /compact,
--resume, and a person's change in between. No test sets a switch of its own.

What is asserted is the store, Claude's own task files, and the request bodies Claude
Code sends to the model: those are what the agent sees."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agents.real.anthropic_server import (
    DEFAULT_MODELS,
    AnthropicServer,
    Reply,
    Request,
    ToolCall,
)
from tests.agents.real.claude_run import PROJECT, ClaudeProject

pytestmark = [pytest.mark.real_agent, pytest.mark.slow]

Step = tuple[Callable[[], None] | None, Reply]


class Steps:
    """The model's turns, in order: a step may first make a person's change (the model is
    "thinking" while it lands). A compaction's summary request is answered apart.
    ``seen[k]`` is the request step ``k`` answered.

    Like a real model, it loads a tool that Claude Code only names (a deferred tool:
    2.1.332's todo tools and MCP tools) with ``ToolSearch`` before it calls it; that turn
    is no step (``searches`` holds them)."""

    def __init__(self, steps: list[Step], *, wait_for: str | None = None):
        self.steps = steps
        self.seen: dict[int, Request] = {}
        self.searches: list[Request] = []
        self.wait_for = wait_for
        self.waits = 0

    def __call__(self, req: Request, before: list[Request]) -> Reply:
        if not req.agent_turn:
            return Reply(text="A title.")
        if req.compaction:
            return Reply(text="<summary>The drafter work was planned as tasks.</summary>")
        if self.wait_for and not (req.loaded(self.wait_for) or self.wait_for in req.deferred) \
                and self.waits < 20:
            # `claude -p` asks the model before its MCP servers are connected: a harmless
            # turn (not a step) until the server's tools are offered.
            self.waits += 1
            time.sleep(0.5)
            return call("TaskList")
        k = len(self.seen)
        if k >= len(self.steps):
            self.seen[k] = req
            return Reply(text="done.")
        change, reply = self.steps[k]
        if any(not req.loaded(c.name) and c.name in req.deferred for c in reply.calls):
            # Every deferred tool the work ahead needs, in one search.
            ahead = dict.fromkeys(c.name for _, r in self.steps[k:] for c in r.calls)
            self.searches.append(req)
            return call("ToolSearch", query="select:" + ",".join(
                n for n in ahead if not req.loaded(n) and n in req.deferred))
        self.seen[k] = req
        if change is not None:
            change()
        return reply


def call(name: str, **args: object) -> Reply:
    return Reply(calls=[ToolCall(name, dict(args))])


def reminders(req: Request) -> str:
    """The system reminders of the last user message (where hook context goes), as the
    model reads them (decoded)."""
    return Request("", {"messages": req.after_last_turn()}).plain


def test_tasks_a_persons_edits_compact_and_resume(tmp_path: Path, claude_version: str) -> None:
    """`harness hook claude-code install` as it is (the test sets no switch): the task
    tools are on, the tasks land, and a person's edits, /compact and --resume hold."""
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
        claude = ClaudeProject(tmp_path, api, version=claude_version)
        holder.append(claude)
        assert "todo tools: turned on" in claude.installed
        first = claude.run("Plan the drafter work as tasks.")
        assert first.code == 0, first.stderr
        sid = first.session_id
        # The model asked for is the version's own default; since 2.1.233 the task tools
        # come deferred (named, loaded through ToolSearch) once the switch is on.
        start = steps.searches[0] if steps.searches else steps.seen[0]
        assert start.body["model"] == DEFAULT_MODELS.get(claude_version, start.body["model"])
        assert "TaskCreate" in {*start.tools, *start.deferred}
        if claude_version != "2.1.197":
            assert "TaskCreate" in start.deferred and steps.searches
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


def test_todowrite_era_a_persons_priority_in_the_next_request(tmp_path: Path, claude_version: str) -> None:
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
        claude = ClaudeProject(tmp_path, api, version=claude_version,
                              CLAUDE_CODE_ENABLE_TASKS="0")
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


def test_todo_tools_off_the_plan_goes_through_the_mcp_server(tmp_path: Path,
                                                          claude_version: str) -> None:
    """`install --no-todo-tools`: the model keeps its plan with the harness MCP server that
    install registered (.mcp.json), as the SessionStart hook tells it; on 2.1.332 it finds
    mcp__harness__todowrite through ToolSearch, as a real model would."""
    holder: list[ClaudeProject] = []
    steps = Steps([
        (None, call("mcp__harness__todowrite", todos=[
            {"content": "Train the drafter", "status": "in_progress", "priority": "medium"},
            {"content": "Write the report", "status": "pending", "priority": "medium"}])),
        (lambda: holder[0].person("prio", "t1", "high"), call("mcp__harness__todoread")),
        (lambda: holder[0].person("block", "t2", "--reason", "no GPU quota"),
         call("mcp__harness__todo_update", id="t1", status="completed")),
        (None, Reply(text="done.")),
    ], wait_for="mcp__harness__todowrite")
    with AnthropicServer(steps) as api:
        api.dump_to = tmp_path / "requests.json"
        claude = ClaudeProject(tmp_path, api, version=claude_version,
                               install=("--no-todo-tools",))
        claude.trust()  # as a person who has opened Claude Code in the project once
        holder.append(claude)
        assert "todo tools: left off (--no-todo-tools)" in claude.installed
        r = claude.run("Plan the drafter work.")
        assert r.code == 0, r.stderr
        first = steps.seen[0]
        assert "keep your plan with mcp__harness__todowrite" in first.plain  # SessionStart
        if claude_version != "2.1.197":  # the tools are gated, and MCP tools deferred
            assert not {"TaskCreate", "TodoWrite"} & {*first.tools, *first.deferred}
            assert [c["input"] for c in _calls(steps.seen[0], "ToolSearch")] == [{
                "query": "select:mcp__harness__todowrite,mcp__harness__todoread,"
                         "mcp__harness__todo_update"}]
        wrote = steps.seen[1].tool_results()[0]
        assert '"ids"' in wrote and "t1" in wrote
        # Claude Code shows the model an MCP answer's structured content, as JSON.
        read = json.loads(steps.seen[2].tool_results()[0])  # todoread: the list itself
        assert [(t["id"], t["priority"]) for t in read["todos"]] == [("t1", "high"),
                                                                     ("t2", "medium")]
        updated = json.loads(steps.seen[3].tool_results()[0])  # the next answer: the notice
        assert updated["notice"].startswith(
            "todo-harness: the todo list changed since you last saw it")
        assert "\"Write the report\" (t2): status 'pending' -> 'blocked' ('no GPU quota') " \
            "by human" in updated["notice"]
        assert "t1 priority" not in updated["notice"]  # told once: todoread showed it
    todos = claude.todos()
    assert [(t.content, t.status, t.priority) for t in todos] == [
        ("Train the drafter", "completed", "high"),
        ("Write the report", "blocked", "medium")]
    assert claude.hook_log() == ""


def _calls(req: Request, name: str) -> list[dict[str, object]]:
    """The model's calls of tool ``name`` in the turns before ``req``."""
    return [b for m in req.messages if m.get("role") == "assistant"
            for b in (m.get("content") if isinstance(m.get("content"), list) else [])
            if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == name]
