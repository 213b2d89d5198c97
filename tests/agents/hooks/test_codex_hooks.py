"""`harness hook codex` with payloads recorded in Codex's own shapes (its hook input
schemas: tests/data/hooks/codex-*.json): the plan is merged from PostToolUse update_plan,
a compaction is one cut in the history, and the plan comes back at SessionStart
(`source: compact`, which Codex sends after every compaction) in the output shape Codex
accepts. PreCompact and PostCompact print nothing: Codex rejects any context there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from state.store import Store
from tests.conftest import DATA, harness_subprocess

HOOKS = DATA / "hooks"
# Codex's session-start.command.output schema: these keys, and no others.
SESSION_START_KEYS = {"continue", "hookSpecificOutput", "stopReason", "suppressOutput",
                      "systemMessage"}
SPECIFIC_KEYS = {"additionalContext", "env", "hookEventName"}


def payload(name: str, **changes: Any) -> dict[str, Any]:
    return {**json.loads((HOOKS / f"codex-{name}.json").read_text()), **changes}


def hook(db: Path, body: dict[str, Any]):
    r = harness_subprocess(["hook", "codex"], stdin=json.dumps(body).encode(),
                           env={"HARNESS_DB": str(db)})
    assert r.returncode == 0, r.stderr
    assert b"logged to" not in r.stderr, r.stderr
    return r


def test_the_plan_survives_a_compaction(db_path: Path) -> None:
    assert hook(db_path, payload("session-start-startup")).stdout == b""  # nothing yet
    assert hook(db_path, payload("post-tool-use-update-plan")).stdout == b""
    assert hook(db_path, payload("pre-compact-manual")).stdout == b""
    assert hook(db_path, payload("post-compact-manual")).stdout == b""
    r = hook(db_path, payload("session-start-compact"))
    out = json.loads(r.stdout)
    assert set(out) <= SESSION_START_KEYS
    spec = out["hookSpecificOutput"]
    assert set(spec) <= SPECIFIC_KEYS and spec["hookEventName"] == "SessionStart"
    ctx = spec["additionalContext"]
    assert ctx.startswith("Todo list (session eagle3): 0/3 completed.")
    assert "update_plan calls update it" in ctx
    assert "[>] t1 Regenerate 10K samples with <think> kept (medium)" in ctx
    assert "[ ] t3 Train the drafter (medium)" in ctx
    with Store.open(str(db_path)) as s:
        row = s.session_by_name("eagle3")
        assert row is not None
        events = s.events(row.id)
    cuts = [(e.actor, e.payload["cut"], e.payload.get("trigger")) for e in events
            if e.kind == "agent.context"]
    # startup, then one compaction (PreCompact, PostCompact and SessionStart compact).
    assert cuts == [("agent:codex", "startup", None), ("agent:codex", "compact", "manual")]
    refs = {e.ref for e in events if e.kind == "todo.created"}
    assert refs == {"call_9YqZ2u1"}


def test_the_same_plan_from_the_hook_and_the_rollout_changes_the_list_once(
        db_path: Path, tmp_path: Path) -> None:
    hook(db_path, payload("post-tool-use-update-plan"))
    hook(db_path, payload("post-tool-use-update-plan"))  # delivered twice
    with Store.open(str(db_path)) as s:
        row = s.session_by_name("eagle3")
        assert row is not None
        assert len([e for e in s.events(row.id) if e.kind.startswith("todo.")]) == 3


def test_a_bad_plan_never_fails_codex(db_path: Path, tmp_path: Path) -> None:
    bad = payload("post-tool-use-update-plan",
                  tool_input={"plan": [{"step": "x", "status": "done"}]})
    r = harness_subprocess(["hook", "codex"], stdin=json.dumps(bad).encode(),
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0 and r.stdout == b""
    log = (tmp_path / "data" / "logs" / "hooks.log").read_text()
    assert "unknown status 'done'" in log


def test_a_persons_change_rides_on_the_next_prompt_once(db_path: Path) -> None:
    hook(db_path, payload("post-tool-use-update-plan"))
    prompt = {**payload("session-start-startup"), "hook_event_name": "UserPromptSubmit",
              "prompt": "carry on"}
    prompt.pop("source", None)
    assert hook(db_path, prompt).stdout == b""  # nothing new since Codex's own plan
    r = harness_subprocess(["--session", "eagle3", "prio", "t3", "high"],
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0, r.stderr
    out = json.loads(hook(db_path, prompt).stdout)
    spec = out["hookSpecificOutput"]
    assert spec["hookEventName"] == "UserPromptSubmit"
    assert spec["additionalContext"] == (
        "todo-harness: the todo list changed since you last saw it:\n"
        "- step 3 \"Train the drafter\" (t3): priority 'medium' -> 'high' by human")
    assert hook(db_path, prompt).stdout == b""  # told once
