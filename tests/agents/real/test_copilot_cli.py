"""The real GitHub Copilot CLI (1.0.102, from npm) against a scripted model, with no GitHub
sign-in: offline (``COPILOT_OFFLINE=true``), its model a local OpenAI-compatible provider
(``COPILOT_PROVIDER_BASE_URL``, Chat Completions). The model keeps its plan in its session's
todos table with the ``sql`` tool; the hooks `harness hook copilot install` writes copy it
into the store (statuses, dependencies), tell the model a person's change in the next
request, and give the list back after an automatic compaction and on `--resume`.

What is asserted is the store and the request bodies Copilot CLI sends to the model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from state.store import Store
from tests.agents.real import npm
from tests.agents.real.conftest import HARNESS_CMD, SESSION, harness, hook_log, todos
from tests.agents.real.model_server import Call, ModelServer, Reply, Request

pytestmark = [pytest.mark.real_agent, pytest.mark.slow]

NOTICE = "todo-harness: the todo list changed since you last saw it"
PLAN = ("INSERT INTO todos (id, title, description) VALUES "
        "('regen', 'Regenerate samples', '10K with the reasoning kept'), "
        "('vocab', 'Build the vocab mapping', 'd2t and t2d'), "
        "('train', 'Train the drafter', '3 epochs'); "
        "INSERT INTO todo_deps (todo_id, depends_on) VALUES ('vocab', 'regen'), "
        "('train', 'vocab');")


def sql(query: str, tokens: int = 100) -> Reply:
    return Reply(calls=[Call("sql", {"description": "todos", "query": query})],
                 total_tokens=tokens)


def messages_after_last_turn(req: Request) -> str:
    msgs = req.body.get("messages") or []
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
    return "\n".join(str(m.get("content") or "") for m in msgs[last + 1:])


def test_todos_table_a_persons_change_a_compaction_and_a_resume(
        tmp_path: Path, project: Path, agent_env: dict[str, str]) -> None:
    exe, cache = npm.copilot()
    seen: list[Request] = []
    summaries: list[int] = []  # how many agent turns came before each compaction

    def person() -> None:
        harness(env, "-s", SESSION, "prio", "t3", "high")

    steps = [
        lambda: sql(PLAN),
        lambda: sql("UPDATE todos SET status = 'in_progress' WHERE id = 'regen'"),
        lambda: (person(), sql("UPDATE todos SET status = 'done' WHERE id = 'regen'; "
                               "UPDATE todos SET status = 'in_progress' WHERE id = 'vocab'"))[1],
        lambda: Reply(text="Working on the vocab mapping."),
        # --resume: the answer's prompt nearly fills the window, so Copilot compacts.
        lambda: sql("SELECT id, status FROM todos", tokens=19_000),
        lambda: sql("SELECT id FROM todos WHERE status = 'pending'"),
        lambda: Reply(text="done."),
    ]

    def script(req: Request, n: int) -> Reply:
        if "The history is being compacted" in req.text:
            summaries.append(len(seen))
            return Reply(text="<overview>The drafter work, planned in the todos "
                              "table.</overview>")
        seen.append(req)
        k = len(seen) - 1
        return steps[k]() if k < len(steps) else Reply(text="done.")

    with ModelServer(script, max_requests=20) as srv:
        env = {**agent_env, "XDG_CACHE_HOME": str(cache), "COPILOT_OFFLINE": "true",
               "COPILOT_PROVIDER_BASE_URL": srv.url, "COPILOT_PROVIDER_API_KEY": "dummy",
               "COPILOT_MODEL": "gpt-4.1", "COPILOT_PROVIDER_MAX_PROMPT_TOKENS": "20000",
               "COPILOT_AUTO_UPDATE": "false", "COPILOT_ALLOW_ALL": "true"}
        for key in ("GITHUB_TOKEN", "GH_TOKEN", "COPILOT_GITHUB_TOKEN", "COPILOT_HOME"):
            env.pop(key, None)
        out = harness(env, "hook", "copilot", "install", "--command",
                      f"{HARNESS_CMD} hook copilot", cwd=project).stdout
        assert "added the harness hooks (sessionStart, userPromptSubmitted, postToolUse, " \
               "preCompact)" in out

        def run(*args: str) -> str:
            r = subprocess.run([str(exe), *args], cwd=project, env=env, capture_output=True,
                               text=True, timeout=180, stdin=subprocess.DEVNULL)
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            return r.stdout + r.stderr

        first = run("-p", "Plan the drafter work.")
        assert "sql" in [t["function"]["name"] for t in seen[0].body["tools"]]
        told = messages_after_last_turn(seen[3])
        assert NOTICE in told, told
        assert "train \"Train the drafter\" (t3): priority 'medium' -> 'high' by human" \
            in told, told
        assert NOTICE not in messages_after_last_turn(seen[2])
        assert todos(env) == [
            {"id": "t1", "text": "Regenerate samples", "status": "completed",
             "priority": "medium"},
            {"id": "t2", "text": "Build the vocab mapping", "status": "in_progress",
             "priority": "medium"},
            {"id": "t3", "text": "Train the drafter", "status": "pending", "priority": "high"}]
        with Store.open(env["HARNESS_DB"]) as s:
            row = s.session_by_name(SESSION)
            assert row is not None
            assert [t.depends_on for t in s.todos(row.id)] == [[], [1], [2]]

        sid = next(line.split("--resume=")[1].split()[0] for line in first.splitlines()
                   if "--resume=" in line)
        harness(env, "-s", SESSION, "add", "Check the acceptance length", "-p", "high")
        run("-p", "Carry on.", f"--resume={sid}")
        back = json.dumps(seen[4].body["messages"])
        assert "Todo list (session work): 1/4 completed." in back
        assert "[ ] t4 Check the acceptance length (high)" in back
        # The compaction (Copilot CLI summarises in the background, beside the turn in
        # flight): the requests built on the compacted history, after its summary, get the
        # whole list on the first tool result the hooks answer after it.
        assert summaries, "Copilot CLI did not compact"
        compacted = [r for r in seen
                     if "The drafter work, planned in the todos table." in json.dumps(r.body)]
        assert compacted, "no request was built on the compacted history"
        assert any("Todo list (session work): 1/4 completed." in messages_after_last_turn(r)
                   for r in compacted), [messages_after_last_turn(r) for r in compacted]
    with Store.open(env["HARNESS_DB"]) as s:
        row = s.session_by_name(SESSION)
        assert row is not None
        cuts = [(e.payload["cut"], e.payload.get("trigger")) for e in s.events(row.id)
                if e.kind == "agent.context"]
    assert cuts[0] == ("startup", None) and ("resume", None) in cuts
    assert ("compact", "auto") in cuts
    assert hook_log(env) == ""
    assert os.path.exists(project / ".github" / "hooks" / "todo-harness.json")
