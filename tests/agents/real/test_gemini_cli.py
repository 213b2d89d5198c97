"""The real Gemini CLI (0.61.0, from npm) against a scripted Gemini API: its task tracker
(on its default model) and write_todos (on a Gemini 2 model) through the hooks and
settings `harness hook gemini-cli install` writes, an automatic compression, a resume,
a person's change mid-turn, and the harness MCP server for a model with neither tool.

What is asserted is the store and the request bodies Gemini CLI sends to the model:
those are what the agent sees."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from state.store import Store
from tests.agents.real.conftest import harness
from tests.agents.real.gemini_run import GeminiProject
from tests.agents.real.gemini_server import SUMMARY, Call, GeminiServer, Reply, Request

pytestmark = [pytest.mark.real_agent, pytest.mark.slow]

Step = Callable[[Request], Reply] | Reply
NOTICE = "todo-harness: the todo list changed since you last saw it"


class Steps:
    """The model's turns, in order; a step may be a function of the request it answers
    (to use a task id the tracker just made up). ``seen[k]`` is the request step ``k``
    answered."""

    def __init__(self, steps: list[Step]):
        self.steps = steps
        self.seen: dict[int, Request] = {}

    def __call__(self, req: Request, before: list[Request]) -> Reply:
        k = len(self.seen)
        self.seen[k] = req
        if k >= len(self.steps):
            return Reply(text="done.")
        step = self.steps[k]
        return step(req) if callable(step) else step


def call(name: str, **args: object) -> Reply:
    return Reply(calls=[Call(name, dict(args))])


def created(req: Request) -> str:
    """The id the tracker gave the task of the last call (its answer to the model)."""
    m = re.match(r"Created task (\w+):", req.tool_results()[0])
    assert m, req.tool_results()
    return m.group(1)


def test_tracker_a_persons_change_a_compression_and_a_resume(tmp_path: Path) -> None:
    ids: list[str] = []
    holder: list[GeminiProject] = []

    def remember(reply: Reply | Callable[[Request], Reply]) -> Callable[[Request], Reply]:
        def step(req: Request) -> Reply:
            if req.tool_results() and req.tool_results()[0].startswith("Created task"):
                ids.append(created(req))
            return reply(req) if callable(reply) else reply
        return step

    def person_then(reply: Callable[[Request], Reply]) -> Callable[[Request], Reply]:
        def step(req: Request) -> Reply:
            holder[0].person("prio", "t3", "high")  # while the model works
            return reply(req)
        return step

    steps = Steps([
        call("tracker_create_task", title="Regenerate samples", type="task",
             description="10K samples with the reasoning kept"),
        remember(lambda req: call("tracker_create_task", title="Build the vocab mapping",
                                  type="task", description="d2t and t2d",
                                  dependencies=[ids[0]])),
        remember(lambda req: call("tracker_create_task", title="Train the drafter",
                                  type="task", description="3 epochs",
                                  dependencies=[ids[1]])),
        remember(lambda req: call("tracker_update_task", id=ids[0], status="in_progress")),
        person_then(lambda req: call("tracker_update_task", id=ids[0], status="closed")),
        lambda req: call("tracker_update_task", id=ids[1], status="in_progress"),
        Reply(text="Working on the vocab mapping."),
        # --resume: the list comes back; the answer's prompt fills the context, so Gemini
        # CLI compresses before the next request.
        Reply(calls=[Call("tracker_list_tasks", {})], prompt_tokens=900_000),
        Reply(text="done."),
    ])
    with GeminiServer(steps) as api:
        api.dump_to = tmp_path / "requests.json"
        gemini = GeminiProject(tmp_path, api)
        holder.append(gemini)
        first = gemini.run("Plan the drafter work.")
        assert first.code == 0, first.stderr
        tools = steps.seen[0].tools
        assert {"tracker_create_task", "tracker_update_task", "tracker_add_dependency"} \
            <= set(tools) and "write_todos" not in tools
        # The person's priority, told on the next tool result the model reads.
        told = steps.seen[5].plain
        assert NOTICE in told, told
        assert f'task {ids[2]} "Train the drafter" (t3): priority \'medium\' → \'high\' ' \
               "by human" in told, told
        assert NOTICE not in steps.seen[4].plain
        todos = gemini.todos()
        assert [(t.num, t.content, t.status, t.priority, t.depends_on) for t in todos] == [
            (1, "Regenerate samples", "completed", "medium", []),
            (2, "Build the vocab mapping", "in_progress", "medium", [1]),
            (3, "Train the drafter", "pending", "high", [2])]

        gemini.person("add", "Check the acceptance length", "-p", "high")  # in between
        resumed = gemini.run("Carry on.", resume=True)
        assert resumed.code == 0, resumed.stderr
        assert resumed.session_id == first.session_id
        # The resume: the whole list before the prompt, the person's new item included.
        back = steps.seen[7].last_user_text()
        assert "Todo list (session eagle3): 1/4 completed." in back
        assert "[→] t2 Build the vocab mapping (medium)" in back
        assert "[ ] t3 Train the drafter (high) - waiting on t2" in back
        assert "[ ] t4 Check the acceptance length (high)" in back
        # The compression: Gemini CLI summarised, and the request after it holds the
        # summary and, on the tracker's answer, the whole list again.
        assert len(api.summaries) == 2
        after = steps.seen[8]
        assert SUMMARY in after.text
        assert "Todo list (session eagle3): 1/4 completed." in after.last_user_text()
        assert "- [" in after.tool_results()[0]  # the tracker's own answer comes first
    cuts = [(e.payload["cut"], e.payload.get("trigger")) for e in gemini.events()
            if e.kind == "agent.context"]
    assert cuts == [("startup", None), ("resume", None), ("compact", "auto")]
    assert gemini.hook_log() == ""
    assert api.errors == [] and len(api.requests) < api.max_requests
    # Gemini CLI's own recording of the session, imported elsewhere, is the same list. (A
    # resume in another minute than the start leaves a second, all but empty file.)
    other = {**gemini.env, "HARNESS_DB": str(tmp_path / "imported.db")}
    harness(other, "import", *map(str, gemini.chats()), "--session", "imported")
    with Store.open(other["HARNESS_DB"]) as s:
        row = s.session_by_name("imported")
        assert row is not None
        assert [(t.content, t.status, t.depends_on) for t in s.todos(row.id)] == \
            [(t.content, t.status, t.depends_on) for t in todos[:3]]


def test_write_todos_on_a_gemini_2_model(tmp_path: Path) -> None:
    holder: list[GeminiProject] = []

    def todo(text: str, status: str) -> dict[str, str]:
        return {"description": text, "status": status}

    def person(reply: Reply) -> Callable[[Request], Reply]:
        def step(req: Request) -> Reply:
            holder[0].person("prio", "t2", "high")
            return reply
        return step

    steps = Steps([
        call("write_todos", todos=[todo("Regenerate samples", "in_progress"),
                                   todo("Build the vocab mapping", "pending"),
                                   todo("Train the drafter", "pending")]),
        person(call("write_todos", todos=[todo("Regenerate samples", "completed"),
                                          todo("Build the vocab mapping", "blocked"),
                                          todo("Train the drafter", "cancelled")])),
        Reply(text="done."),
    ])
    with GeminiServer(steps) as api:
        api.dump_to = tmp_path / "requests.json"
        gemini = GeminiProject(tmp_path, api, "--no-task-tools")
        holder.append(gemini)
        # The settings name no model, and Gemini CLI's default has neither tool: the MCP
        # server is there too, for the runs without --model.
        assert "mcpServers.harness" in gemini.installed
        # Headless, Gemini CLI offers only the tools its policy allows without asking;
        # write_todos is not among them by default (the tracker's tools are).
        policy = tmp_path / "todos.toml"
        policy.write_text('[[rule]]\ntoolName = "write_todos"\ndecision = "allow"\n'
                          'priority = 100\n')
        r = gemini.run("Plan the drafter work.", "--model", "gemini-2.5-flash",
                       "--policy", str(policy))
        assert r.code == 0, r.stderr
        assert steps.seen[0].model == "gemini-2.5-flash"
        assert "write_todos" in steps.seen[0].tools
        assert not any(t.startswith("tracker_") for t in steps.seen[0].tools)
        told = steps.seen[2].plain
        assert "item 2 \"Build the vocab mapping\" (t2): priority 'medium' → 'high' " \
               "by human" in told, told
    todos = gemini.todos()
    assert [(t.content, t.status, t.priority) for t in todos] == [
        ("Regenerate samples", "completed", "medium"),
        ("Build the vocab mapping", "blocked", "high"),
        ("Train the drafter", "cancelled", "medium")]
    assert gemini.hook_log() == ""


def test_the_mcp_server_for_a_model_with_neither_tool(tmp_path: Path) -> None:
    holder: list[GeminiProject] = []
    steps = Steps([
        call("mcp_harness_todowrite", todos=[
            {"content": "Train the drafter", "status": "in_progress", "priority": "medium"},
            {"content": "Write the report", "status": "pending", "priority": "medium"}]),
        lambda req: (holder[0].person("prio", "t2", "high"),
                     call("mcp_harness_todoread"))[1],
        Reply(text="done."),
    ])
    with GeminiServer(steps) as api:
        api.dump_to = tmp_path / "requests.json"
        gemini = GeminiProject(tmp_path, api, "--no-task-tools")
        holder.append(gemini)
        assert "mcpServers.harness" in gemini.installed
        settings = json.loads((gemini.dir / ".gemini" / "settings.json").read_text())
        settings["mcpServers"]["harness"]["trust"] = True  # no confirmation, headless
        (gemini.dir / ".gemini" / "settings.json").write_text(json.dumps(settings))
        r = gemini.run("Plan the drafter work.")
        assert r.code == 0, r.stderr
        tools = steps.seen[0].tools
        assert "mcp_harness_todowrite" in tools, tools
        assert "write_todos" not in tools and not any(t.startswith("tracker_") for t in tools)
        read = steps.seen[2].tool_results()[0]
        assert "Train the drafter" in read and "(high)" in read, read
    todos = gemini.todos()
    assert [(t.content, t.status, t.priority) for t in todos] == [
        ("Train the drafter", "in_progress", "medium"),
        ("Write the report", "pending", "high")]
