"""opencode 1.18.33 itself (from npm), driven by a scripted model over OpenAI Chat
Completions (an `@ai-sdk/openai-compatible` provider in opencode.json), with the plugin in
examples/opencode-plugin/ installed as a person would: its todowrite lands in the store,
a compaction's summary request carries the list with a person's priority, and a person's
change reaches the next request without one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from state.store import Store
from tests.agents.real import npm
from tests.agents.real.conftest import (
    AFTER_STEP_TWO,
    HARNESS_CMD,
    harness,
    hook_log,
    todos,
)
from tests.agents.real.model_server import Call, ModelServer, Reply, Request
from tests.conftest import ROOT

pytestmark = [pytest.mark.real_agent, pytest.mark.slow]

PLUGIN = ROOT / "examples" / "opencode-plugin" / "harness-todos.js"
TODOS = {"todos": [
    {"content": "Regenerate samples", "status": "in_progress", "priority": "medium"},
    {"content": "Build the vocab mapping", "status": "pending", "priority": "medium"},
    {"content": "Train the drafter", "status": "pending", "priority": "medium"}]}


def system_says(req: Request, words: str) -> bool:
    msgs = req.body.get("messages") or []
    return bool(msgs) and words in str(msgs[0].get("content"))


@pytest.fixture
def opencode_run(tmp_path: Path, project: Path, agent_env: dict[str, str]):
    program = npm.opencode()
    home = Path(agent_env["HOME"])
    wrapper = tmp_path / "bin" / "harness"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {HARNESS_CMD} \"$@\"\n")
    wrapper.chmod(0o755)
    plugins = project / ".opencode" / "plugins"
    plugins.mkdir(parents=True)
    (plugins / PLUGIN.name).write_text(PLUGIN.read_text())
    # What opencode would npm-install into each config folder at startup, given from the
    # cache instead (it then finds it there and installs nothing).
    sdk = npm.opencode_plugin_sdk()
    for folder in (project / ".opencode", home / ".config" / "opencode"):
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            if (sdk / name).exists():
                (folder / name).write_text((sdk / name).read_text())
        (folder / "node_modules").symlink_to(sdk / "node_modules")
    env = {**agent_env, "PWD": str(project), "HARNESS_BIN": str(wrapper),
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".data"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".state"),
           "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
           "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
           "OPENCODE_DISABLE_SHARE": "1"}

    def run(srv: ModelServer, prompt: str, *args: str,
            context: int = 200000) -> subprocess.CompletedProcess[str]:
        config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False,
                  "share": "disabled", "model": "scripted/scripted",
                  "small_model": "scripted/scripted",
                  "provider": {"scripted": {
                      "npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                      "options": {"baseURL": srv.url, "apiKey": "dummy"},
                      "models": {"scripted": {"name": "Scripted", "tool_call": True,
                                              "limit": {"context": context,
                                                        "output": 2000}}}}}}
        (project / "opencode.json").write_text(json.dumps(config, indent=2))
        r = subprocess.run([str(program), "run", *args, prompt], cwd=project, env=env,
                           capture_output=True, text=True, timeout=180,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        return r

    return run, env


def test_plugin_the_notice_and_a_compaction(opencode_run) -> None:
    run, env = opencode_run
    step2 = {"todos": [{**TODOS["todos"][0], "status": "completed"},
                       {**TODOS["todos"][1], "status": "in_progress"}, TODOS["todos"][2]]}
    turns: list[Request] = []  # the agent's own requests (not the title's nor the summary's)
    summaries: list[Request] = []

    def script(req: Request, n: int) -> Reply:
        if system_says(req, "title generator"):
            return Reply(text="A plan")
        if system_says(req, "context summarization agent"):
            summaries.append(req)
            return Reply(text="Summary: the plan is in the todo list.")
        turns.append(req)
        if len(turns) == 1:
            return Reply(calls=[Call("todowrite", TODOS)])
        if len(turns) == 2:
            harness(env, "prio", "t3", "high")  # a person, while opencode works
            return Reply(calls=[Call("todowrite", step2)])
        if len(turns) == 3:
            # Past the model's context (20000): opencode compacts before going on.
            return Reply(text="working", total_tokens=50000)
        return Reply(text="done.")

    with ModelServer(script, max_requests=10) as srv:
        run(srv, "make a plan", context=20000)
        assert len(srv.requests) < srv.max_requests

    assert todos(env) == AFTER_STEP_TWO
    assert hook_log(env) == ""
    # The person's change, in the very next request (appended to todowrite's output).
    # Named by its place in opencode's list, and by its text.
    line = "item 3 \"Train the drafter\" (t3): priority 'medium' -> 'high' by human"
    assert line not in turns[1].plain
    assert "todo-harness: the todo list changed since you last saw it" in turns[2].plain
    assert line in turns[2].plain
    # The compaction: the summary is asked for with the list, as the store has it.
    assert len(summaries) == 1
    sent = summaries[0].text
    assert "Todo list (session work): 1/3 completed." in sent
    assert "[ ] t3 Train the drafter (high)" in sent
    with Store.open(env["HARNESS_DB"]) as s:
        row = s.session_by_name("work")
        assert row is not None
        cuts = [(e.actor, e.payload["cut"]) for e in s.events(row.id)
                if e.kind == "agent.context"]
    assert cuts == [("agent:opencode", "compact")]
