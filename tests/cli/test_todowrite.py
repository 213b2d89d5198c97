"""Agent full-list writes: every format, and the merge rules of harness/merge.py."""

from __future__ import annotations

import json

import pytest

from harness import formats, todos
from harness.agents.todolist import todoread, todowrite
from harness.errors import InputError
from state.store import Store

SEED = {"todos": [
    {"content": "Fix 01b_generate_synthetic.py: reasoning reassembly with <think>/</think> tokens",
     "priority": "high", "status": "completed"},
    {"content": "Clean up bad data (/data/eagle3/synth_25k/) on container", "priority": "high",
     "status": "completed"},
    {"content": "SCP fixed script to container and restart inference (10K samples)",
     "priority": "high", "status": "completed"},
    {"content": "Run vocab mapping (03_build_vocab_mapping.py)", "priority": "high",
     "status": "in_progress"},
    {"content": "Start vLLM with EAGLE-3 speculative decoding", "priority": "medium",
     "status": "pending"},
]}


def write(store: Store, sid: int, payload: object, actor: str = "agent:test", **kw):
    return todowrite(store, sid, formats.parse(payload), actor=actor, **kw)


@pytest.fixture
def sid(store: Store) -> int:
    return store.create_session("s", actor="human")


def test_seed_list_round_trips(cli) -> None:
    r = cli(["todowrite"], json.dumps(SEED))
    assert r.code == 0, r.err
    assert json.loads(r.out) == SEED
    back = cli(["todoread", "--format", "opencode"])
    assert json.loads(back.out) == SEED
    # Writing it again changes nothing and writes no event.
    before = cli(["log", "--json"]).out
    again = cli(["todowrite"], json.dumps(SEED))
    assert again.code == 0 and json.loads(again.out) == SEED
    assert cli(["log", "--json"]).out == before


def test_noop_write_writes_no_event(store: Store, sid: int) -> None:
    write(store, sid, SEED)
    n = store.last_n(sid)
    result = write(store, sid, SEED)
    assert result.events == 0
    assert store.last_n(sid) == n


def test_person_priority_survives_claude_v2_write(store: Store, sid: int) -> None:
    v2 = {"todos": [{"content": "Build vocab", "status": "pending", "activeForm": "Building vocab"},
                    {"content": "Train", "status": "pending", "activeForm": "Training"}]}
    write(store, sid, v2, actor="agent:claude")
    todos.set_priority(store, sid, "t2", "high")
    v2["todos"][0]["status"] = "in_progress"
    write(store, sid, v2, actor="agent:claude")
    by_content = {t.content: t for t in store.todos(sid)}
    assert by_content["Train"].priority == "high"
    assert by_content["Build vocab"].status == "in_progress"
    assert by_content["Build vocab"].active_form == "Building vocab"


def test_person_priority_survives_stale_opencode_write(store: Store, sid: int) -> None:
    """opencode always sends a priority; resending its stale value is not a change."""
    write(store, sid, SEED, actor="agent:opencode")
    todos.set_priority(store, sid, "t5", "low")
    payload = json.loads(json.dumps(SEED))
    payload["todos"][3]["status"] = "completed"
    result = write(store, sid, payload, actor="agent:opencode")
    t5 = store.todo(sid, 5)
    assert t5.priority == "low"
    assert store.todo(sid, 4).status == "completed"
    # ... and the answer tells the agent about the person's change.
    assert any("t5 priority: 'medium' -> 'low'" in n for n in result.notes)
    assert result.response()["todos"][4]["priority"] == "low"


def test_agent_can_still_change_priority_itself(store: Store, sid: int) -> None:
    write(store, sid, SEED, actor="agent:opencode")
    payload = json.loads(json.dumps(SEED))
    payload["todos"][4]["priority"] = "high"
    write(store, sid, payload, actor="agent:opencode")
    assert store.todo(sid, 5).priority == "high"


def test_person_item_survives_agent_write_that_omits_it(store: Store, sid: int) -> None:
    write(store, sid, SEED)
    mine = todos.add(store, sid, "Check acceptance on held-out data", priority="high")
    result = write(store, sid, SEED)
    assert mine.num in {t.num for t in store.todos(sid)}
    assert result.events == 0
    assert "Check acceptance on held-out data" in [i["content"]
                                                   for i in result.response()["todos"]]
    assert any(f"kept t{mine.num}" in n for n in result.notes)


def test_agent_omission_removes_its_own_item_with_an_event(store: Store, sid: int) -> None:
    write(store, sid, SEED)
    shorter = {"todos": SEED["todos"][:4]}
    result = write(store, sid, shorter)
    assert [t.num for t in store.todos(sid)] == [1, 2, 3, 4]
    assert result.plan.removes == [5]
    removed = store.events(sid, kinds=["todo.removed"])
    assert len(removed) == 1 and removed[0].todo_id == 5
    assert removed[0].payload["content"] == SEED["todos"][4]["content"]


def test_blocked_is_not_undone_by_pending(store: Store, sid: int) -> None:
    v2 = {"todos": [{"content": "Serve with vLLM", "status": "pending", "activeForm": "Serving"}]}
    write(store, sid, v2, actor="agent:claude", sees_response=False)
    todos.set_status(store, sid, "t1", "blocked", reason="kimi_k2 not in eagle3 whitelist")
    write(store, sid, v2, actor="agent:claude", sees_response=False)
    assert store.todo(sid, 1).status == "blocked"
    # Without a view (a new agent), pending still does not unblock.
    write(store, sid, v2, actor="agent:other", sees_response=False)
    assert store.todo(sid, 1).status == "blocked"
    v2["todos"][0]["status"] = "in_progress"
    write(store, sid, v2, actor="agent:claude", sees_response=False)
    t = store.todo(sid, 1)
    assert t.status == "in_progress" and t.blocked_reason is None


def test_hook_style_agent_does_not_undo_a_persons_done(store: Store, sid: int) -> None:
    v2 = {"todos": [{"content": "A", "status": "pending", "activeForm": "Doing A"},
                    {"content": "B", "status": "pending", "activeForm": "Doing B"}]}
    write(store, sid, v2, actor="agent:claude", sees_response=False)
    todos.set_status(store, sid, "t1", "completed")
    v2["todos"][1]["status"] = "in_progress"
    write(store, sid, v2, actor="agent:claude", sees_response=False)
    assert store.todo(sid, 1).status == "completed"
    assert store.todo(sid, 2).status == "in_progress"


def test_match_by_id_updates_text_instead_of_creating(store: Store, sid: int) -> None:
    v1 = {"todos": [{"id": "1", "content": "Tokenize", "status": "pending", "priority": "high"},
                    {"id": "2", "content": "Train", "status": "pending", "priority": "medium"}]}
    write(store, sid, v1, actor="agent:claude1")
    v1["todos"][0]["content"] = "Tokenize with the chat template"
    write(store, sid, v1, actor="agent:claude1")
    items = store.todos(sid)
    assert len(items) == 2
    assert store.todo(sid, 1).content == "Tokenize with the chat template"


def test_match_by_normalised_and_similar_text(store: Store, sid: int) -> None:
    write(store, sid, {"todos": [
        {"content": "Run vocab mapping", "status": "pending", "priority": "high"},
        {"content": "Train the drafter for 5 epochs", "status": "pending", "priority": "high"}]})
    write(store, sid, {"todos": [
        {"content": "run  VOCAB mapping.", "status": "completed", "priority": "high"},
        {"content": "Train the drafter for 6 epochs", "status": "in_progress",
         "priority": "high"}]})
    items = sorted(store.todos(sid), key=lambda t: t.num)
    assert [t.num for t in items] == [1, 2]
    assert items[0].status == "completed" and items[0].content == "run  VOCAB mapping."
    assert items[1].content == "Train the drafter for 6 epochs"


def test_person_edit_does_not_duplicate_agent_item(store: Store, sid: int) -> None:
    write(store, sid, SEED)
    todos.edit(store, sid, "t4", "Run vocab mapping over loss-masked tokens only")
    write(store, sid, SEED)
    assert len(store.todos(sid)) == 5
    assert store.todo(sid, 4).content == "Run vocab mapping over loss-masked tokens only"


def test_agent_order_and_person_order(store: Store, sid: int) -> None:
    write(store, sid, SEED)
    order = lambda: [t.num for t in sorted(store.todos(sid), key=lambda t: t.position)]  # noqa: E731
    assert order() == [1, 2, 3, 4, 5]
    # The agent reorders: we follow it.
    payload = {"todos": [SEED["todos"][4], *SEED["todos"][:4]]}
    write(store, sid, payload)
    assert order() == [5, 1, 2, 3, 4]
    # A person moves t5 down among the pending items... it is the only pending one, so
    # reorder on the position field directly through `move` within the same section.
    todos.move(store, sid, "t2", down=True)
    moved = order()
    write(store, sid, payload)  # agent resends its old order: the person's order stands
    assert order() == moved


def test_new_agent_item_goes_after_its_predecessor(store: Store, sid: int) -> None:
    write(store, sid, SEED)
    payload = json.loads(json.dumps(SEED))
    payload["todos"].insert(2, {"content": "Re-run clean", "status": "pending",
                                "priority": "low"})
    write(store, sid, payload)
    ordered = [t.content for t in sorted(store.todos(sid), key=lambda t: t.position)]
    assert ordered[2] == "Re-run clean"
    assert ordered[3] == SEED["todos"][2]["content"]


def test_codex_update_plan_with_string_arguments(store: Store, sid: int) -> None:
    call = {"name": "update_plan", "arguments": json.dumps({
        "explanation": "starting", "plan": [{"step": "Generate data", "status": "in_progress"},
                                            {"step": "Train", "status": "pending"}]})}
    result = write(store, sid, call, actor="agent:codex")
    assert result.caps.name == "codex"
    assert result.response() == {"plan": [{"step": "Generate data", "status": "in_progress"},
                                          {"step": "Train", "status": "pending"}]}
    assert [t.priority for t in store.todos(sid)] == ["medium", "medium"]


def test_claude_v1_with_ids_and_tool_use_wrapper(store: Store, sid: int) -> None:
    call = {"type": "tool_use", "name": "TodoWrite", "input": {"todos": [
        {"id": "a", "content": "One", "status": "pending", "priority": "high"}]}}
    w = formats.parse(call, "claude")
    assert w.caps.has_id and w.caps.has_priority and not w.caps.has_cancelled
    result = todowrite(store, sid, w, actor="agent:claude")
    assert result.response() == {"todos": [{"id": "a", "content": "One", "status": "pending",
                                            "priority": "high"}]}


def test_blocked_and_cancelled_read_back_in_agent_shapes(store: Store, sid: int) -> None:
    write(store, sid, SEED)
    todos.set_status(store, sid, "t5", "blocked", reason="whitelist")
    todos.set_status(store, sid, "t4", "cancelled")
    claude = json.loads(todoread(store, sid, "claude"))
    assert [i["status"] for i in claude["todos"]][3:] == ["completed", "pending"]
    opencode = json.loads(todoread(store, sid, "opencode"))
    assert [i["status"] for i in opencode["todos"]][3:] == ["cancelled", "pending"]
    prompt = todoread(store, sid, "prompt")
    assert "[!] t5" in prompt and "blocked: whitelist" in prompt and "[-] t4" in prompt


@pytest.mark.parametrize("payload, message", [
    ({"todos": [{"content": "x", "status": "done"}]}, "todos[0].status: unknown status 'done'"),
    ({"todos": [{"status": "pending"}]}, "todos[0]: missing content"),
    ({"todos": [{"content": "   ", "status": "pending"}]}, "todos[0]: missing content"),
    ({"todos": [{"content": "x"}]}, "todos[0].status: missing status"),
    ({"todos": [{"content": "x", "status": "pending", "priority": "urgent"}]},
     "todos[0].priority: unknown priority 'urgent'"),
    ({"todos": [{"id": "1", "content": "x", "status": "pending", "priority": "high"},
                {"id": "1", "content": "y", "status": "pending", "priority": "high"}]},
     "todos[1].id: duplicate id '1' (also todos[0])"),
    ({"todos": {"content": "x"}}, "`todos` must be a list"),
    ({"nothing": []}, "no todo list found"),
    ({"plan": [{"step": "x", "status": "cancelled"}]}, "plan[0].status: unknown status"),
    ({"todos": [{"content": "x", "status": "blocked", "activeForm": "X"}]},
     "unknown status 'blocked' for claude"),
])
def test_bad_payloads_are_refused(payload: object, message: str) -> None:
    with pytest.raises(InputError) as exc:
        formats.parse(payload)
    assert message in str(exc.value)
