"""Codex 0.171.0 itself (from npm), driven by a scripted model over the Responses API:
`harness hook codex install` makes its hooks run under `codex exec` (update_plan enabled,
hooks trusted), the plan lands in the store, and after an automatic compaction and on
`codex exec resume` the request Codex sends to the model carries the list, with the
priority a person gave it meanwhile."""

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

pytestmark = [pytest.mark.real_agent, pytest.mark.slow]

PLAN = {"explanation": "regenerate, then train",
        "plan": [{"step": "Regenerate samples", "status": "in_progress"},
                 {"step": "Build the vocab mapping", "status": "pending"},
                 {"step": "Train the drafter", "status": "pending"}]}


def provider_config(url: str, project: Path, *, compact_at: int | None = None) -> str:
    lines = ['model = "scripted"', 'model_provider = "scripted"',
             "check_for_update_on_startup = false"]
    if compact_at:
        lines.append(f"model_auto_compact_token_limit = {compact_at}")
    lines += ["", "[model_providers.scripted]", 'name = "scripted"', f'base_url = "{url}"',
              'env_key = "SCRIPTED_API_KEY"', 'wire_api = "responses"', "",
              f"[projects.{json.dumps(str(project))}]", 'trust_level = "trusted"', ""]
    return "\n".join(lines)


def codex_exec(codex: Path, env: dict[str, str], project: Path, *args: str,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", *args], cwd=project,
                       env=env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r


def user_texts(req: Request) -> str:
    return json.dumps([i for i in req.body.get("input", []) if isinstance(i, dict)
                       and i.get("role") in ("user", "developer")], ensure_ascii=False)


COMPACT_PROMPT = "CONTEXT CHECKPOINT COMPACTION"


@pytest.fixture
def codex_run(tmp_path: Path, project: Path, agent_env: dict[str, str]):
    codex = npm.codex()
    home = tmp_path / "codex-home"
    home.mkdir()
    env = {**agent_env, "CODEX_HOME": str(home), "SCRIPTED_API_KEY": "dummy"}

    def setup(srv: ModelServer) -> str:
        (home / "config.toml").write_text(provider_config(srv.url, project, compact_at=4000))
        r = harness(env, "hook", "codex", "install", "--codex", str(codex), "--command",
                    f"{HARNESS_CMD} hook codex", cwd=project)
        return r.stdout

    return codex, env, setup


def test_plan_lands_survives_an_auto_compaction_and_a_resume(
        codex_run, project: Path) -> None:
    codex, env, setup = codex_run
    step2 = {**PLAN, "plan": [{**PLAN["plan"][0], "status": "completed"},
                              {**PLAN["plan"][1], "status": "in_progress"}, PLAN["plan"][2]]}
    seen: dict[str, int] = {}

    def script(req: Request, n: int) -> Reply:
        text = req.text
        if COMPACT_PROMPT in text:
            seen["compact"] = n
            return Reply(text="Summary: regenerating samples; the plan is in update_plan.")
        if "carry on" in user_texts(req) and "resume" not in seen:
            seen["resume"] = n
            return Reply(text="done.")
        if n == 0:
            return Reply(calls=[Call("update_plan", PLAN)])
        if n == 1:
            # A person raises the last step while Codex works; then Codex's next plan
            # (which knows nothing of priorities) comes with a usage past the limit.
            harness(env, "prio", "t3", "high")
            return Reply(text="step 1 done", calls=[Call("update_plan", step2)],
                         total_tokens=9000)
        return Reply(text="done.")

    with ModelServer(script, max_requests=12) as srv:
        out = setup(srv)
        assert "tools.update_plan.enabled" in out and "hooks.state.post_tool_use:0:0" in out
        first = codex_exec(codex, env, project, "make a plan")
        assert "hook: PostToolUse Completed" in first.stderr, first.stderr[-2000:]
        after_cut = srv.requests[seen["compact"] + 1]
        resumed = codex_exec(codex, env, project, "resume", "--last", "carry on")
        assert resumed.returncode == 0
        on_resume = srv.requests[seen["resume"]]
        assert len(srv.requests) < srv.max_requests

    assert todos(env) == AFTER_STEP_TWO
    assert hook_log(env) == ""
    # What the model is given back: after the compaction, and in the resumed session.
    for req in (after_cut, on_resume):
        sent = user_texts(req)
        assert "Todo list (session work): 1/3 completed." in sent
        assert "[>] t2 Build the vocab mapping (medium)" in sent
        assert "[ ] t3 Train the drafter (high)" in sent
    with Store.open(env["HARNESS_DB"]) as s:
        row = s.session_by_name("work")
        assert row is not None
        cuts = [(e.payload["cut"], e.payload.get("trigger")) for e in s.events(row.id)
                if e.kind == "agent.context"]
    assert cuts == [("startup", None), ("compact", "auto"), ("resume", None)]


def test_a_persons_change_is_in_the_next_request_without_a_cut(codex_run,
                                                               project: Path) -> None:
    codex, env, setup = codex_run
    marks: dict[str, int] = {}

    def script(req: Request, n: int) -> Reply:
        if n == 0:
            return Reply(calls=[Call("update_plan", PLAN)])
        if n == 1:
            harness(env, "prio", "t2", "high")  # the person, while Codex works
            marks["changed"] = n
            return Reply(calls=[Call("update_plan", PLAN)])
        return Reply(text="done.")

    with ModelServer(script, max_requests=8) as srv:
        setup(srv)
        codex_exec(codex, env, project, "make a plan")
        requests = list(srv.requests)
    assert COMPACT_PROMPT not in "".join(r.text for r in requests)
    before, after = requests[marks["changed"]].plain, requests[marks["changed"] + 1].plain
    # Named by its place in Codex's plan, and by its text.
    line = "step 2 \"Build the vocab mapping\" (t2): priority 'medium' -> 'high' by human"
    assert line not in before
    assert "todo-harness: the todo list changed since you last saw it" in after
    assert line in after
    assert [t["priority"] for t in todos(env)] == ["medium", "high", "medium"]


def test_install_shows_its_diff_trusts_once_and_says_what_is_left(
        tmp_path: Path, project: Path, agent_env: dict[str, str]) -> None:
    codex = npm.codex()
    home = tmp_path / "codex-home"
    home.mkdir()
    config = home / "config.toml"
    config.write_text('# mine\nmodel = "o3"\n\n[tools.update_plan]\nmax_payload_bytes = 9000\n')
    env = {**agent_env, "CODEX_HOME": str(home)}
    args = ["hook", "codex", "install", "--codex", str(codex), "--command",
            f"{HARNESS_CMD} hook codex"]
    dry = harness(env, *args, "--dry-run", cwd=project).stdout
    assert not (project / ".codex" / "hooks.json").exists()
    assert config.read_text().startswith("# mine\n") and "enabled" not in config.read_text()
    assert "+[tools.update_plan]" not in dry and "+enabled = true" in dry  # in its table
    assert f'+[hooks.state."{project}/.codex/hooks.json:post_tool_use:0:0"]' in dry
    assert "+trusted_hash = \"sha256:" in dry
    assert "then still to do: Codex ignores .codex/ until you trust this project" in dry

    out = harness(env, *args, cwd=project).stdout
    assert "still to do: Codex ignores .codex/ until you trust this project" in out
    text = config.read_text()
    assert text.startswith('# mine\nmodel = "o3"\n\n[tools.update_plan]\n'
                           "max_payload_bytes = 9000\nenabled = true\n")
    assert text.count("trusted_hash") == 5  # one per harness hook
    # Codex itself now calls them trusted.
    from harness.agents.codex.config import hooks_list

    (home / "config.toml").write_text(text + f"\n[projects.{json.dumps(str(project))}]\n"
                                             'trust_level = "trusted"\n')
    listed = {h["eventName"]: h["trustStatus"] for h in hooks_list(str(codex), home, project)}
    assert listed == dict.fromkeys(["sessionStart", "preCompact", "postCompact", "postToolUse",
                                    "userPromptSubmit"], "trusted")
    again = harness(env, *args, cwd=project).stdout
    assert again.count("already up to date") == 2 and "still to do" not in again
