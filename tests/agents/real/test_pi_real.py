"""pi itself (``@mariozechner/pi-coding-agent``, from npm), driven by a scripted model over
OpenAI Chat Completions (a provider in ``~/.pi/agent/models.json``), with nothing but what
``harness hook pi install`` writes: the model is offered the extension's ``todowrite``,
its plan lands in the store and is updated, a person's change reaches its next request
by name, an automatic compaction and a ``pi -c`` resume give the list back, and ``harness
import`` reads the session file to the same list. The extension's TypeScript runs in the
real pi (loaded by pi's own jiti, calling the harness through ``pi.exec``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from state.store import Store
from tests.agents.real.conftest import SESSION, harness, hook_log, todos
from tests.agents.real.model_server import Call, ModelServer, Reply, Request
from tests.agents.real.pi_run import PiProject

pytestmark = [pytest.mark.real_agent, pytest.mark.slow]

PLAN = [{"content": "Regenerate samples", "status": "in_progress", "priority": "medium"},
        {"content": "Build the vocab mapping", "status": "pending", "priority": "medium"},
        {"content": "Train the drafter", "status": "pending", "priority": "medium"}]
NOTICE = "todo-harness: the todo list changed since you last saw it"
CHANGE = "item 3 \"Train the drafter\" (t3): priority 'medium' -> 'high' by human"


def with_status(*statuses: str, last: str = "medium") -> dict[str, object]:
    items = [{**item, "status": s} for item, s in zip(PLAN, statuses, strict=True)]
    items[-1]["priority"] = last
    return {"todos": items}


def summarising(req: Request) -> bool:
    msgs = req.body.get("messages") or []
    return bool(msgs) and "context summarization" in str(msgs[0].get("content"))


def test_plan_a_persons_change_a_compaction_and_a_resume(tmp_path: Path, project: Path,
                                                         agent_env: dict[str, str]) -> None:
    pi = PiProject(tmp_path, agent_env)
    env = pi.env
    first = pi.install()
    extension = pi.extension
    written = extension.read_text()
    assert "wrote the harness's extension" in first.stdout
    again = pi.install()
    assert "already up to date" in again.stdout and extension.read_text() == written

    turns: list[Request] = []  # the agent's own requests (not the compaction's)
    summaries: list[int] = []  # how many turns came before each compaction

    def script(req: Request, n: int) -> Reply:
        if summarising(req):
            summaries.append(len(turns))
            return Reply(text="## Goal\nThe drafter, planned with todowrite.")
        turns.append(req)
        k = len(turns)
        if k == 1:
            return Reply(calls=[Call("todowrite", {"todos": PLAN})])
        if k == 2:
            harness(env, "prio", "t3", "high")  # a person, while pi works
            return Reply(calls=[Call("bash", {"command": "echo regenerated"})])
        if k == 3:  # the model resends the old priority: the person's stays
            return Reply(calls=[Call("todowrite", with_status("completed", "in_progress",
                                                              "pending"))])
        if k == 4:  # usage past the window's threshold: pi compacts after the turn
            return Reply(text="Working on the vocab mapping.", total_tokens=30_000)
        if k == 5:  # `pi -c`: the list as shown
            return Reply(calls=[Call("todowrite", with_status("completed", "completed",
                                                              "in_progress", last="high"))])
        return Reply(text="done.")

    with ModelServer(script, max_requests=12) as srv:
        pi.serve(srv)
        pi.run("-p", "make a plan and start")
        assert summaries == [4], summaries
        pi.run("-c", "-p", "go on")
        assert len(srv.requests) < srv.max_requests

    # Offered to the model, as the extension registers it.
    tools = {t["function"]["name"]: t["function"] for t in turns[0].body["tools"]}
    item = tools["todowrite"]["parameters"]["properties"]["todos"]["items"]
    assert set(item["properties"]) == {"content", "status", "priority"}
    # Written, then updated: its answer is the list as the store has it.
    assert "[>] t1 Regenerate samples (medium)" in turns[1].plain
    # The person's change, in the very next request, named by its place and its text.
    assert CHANGE not in turns[1].plain
    assert NOTICE in turns[2].plain and CHANGE in turns[2].plain
    assert "[>] t2 Build the vocab mapping (medium)" in turns[3].plain
    assert "[ ] t3 Train the drafter (high)" in turns[3].plain
    # After the compaction and the resume: pi's summary, and the list beside the prompt.
    resumed = turns[4].plain
    assert "The drafter, planned with todowrite." in resumed
    assert "Kept by todo-harness across compactions and restarts" in resumed
    assert "[x] t1 Regenerate samples (medium)" in resumed
    assert "[ ] t3 Train the drafter (high)" in resumed

    final = [{"id": "t1", "text": "Regenerate samples", "status": "completed",
              "priority": "medium"},
             {"id": "t2", "text": "Build the vocab mapping", "status": "completed",
              "priority": "medium"},
             {"id": "t3", "text": "Train the drafter", "status": "in_progress",
              "priority": "high"}]
    assert todos(env) == final
    assert hook_log(env) == ""
    with Store.open(env["HARNESS_DB"]) as s:
        row = s.session_by_name(SESSION)
        assert row is not None
        events = s.events(row.id)
    assert [e.payload["cut"] for e in events if e.kind == "agent.context"] == \
        ["startup", "compact", "resume"]
    assert {e.ref for e in events if e.kind.startswith("todo.") and e.actor == "agent:pi"} \
        == {"call_2", "call_6", "call_10"}  # each write carries its tool call's id

    # pi's session file, imported into a session of its own: the same list.
    sessions = pi.sessions()
    assert len(sessions) == 1
    out = harness(env, "import", str(sessions[0]), "--session", "imported", "--json")
    report = json.loads(out.stdout)[0]
    assert (report["format"], report["todo_calls"], report["imported"]) == ("pi-session", 3, 3)
    with Store.open(env["HARNESS_DB"]) as s:
        row = s.session_by_name("imported")
        assert row is not None
        imported = [{"id": t.id, "text": t.content, "status": t.status,
                     "priority": t.priority} for t in s.todos(row.id)]
    assert imported == final

    gone = pi.harness("hook", "pi", "uninstall")
    assert "removed the harness's extension" in gone.stdout
    assert not extension.exists() and extension.parent.is_dir()
