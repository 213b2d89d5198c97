"""`harness hook gemini-cli` with payloads in Gemini CLI 0.61's shapes (its hook input:
``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``, ``timestamp``, then the
event's own fields; an ``AfterTool``'s ``tool_response`` is ``{llmContent, returnDisplay,
error?}``): the tracker's calls and write_todos land in the store, the list comes back
at a start and when a compression is due, a person's change rides on the next answer,
named as the model knows the item. The real program is in tests/agents/real/."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import todos as uc
from harness.agents.gemini import hooks as gemini
from harness.agents.gemini.compress import compression_due, last_prompt_tokens
from harness.context import Harness
from state.store import Store
from tests.conftest import harness_subprocess

GEMINI_SESSION = "4666e9a2-c794-4e34-b8bd-9f2bbac998e5"


@pytest.fixture(autouse=True)
def _gemini_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "ghome"))
    monkeypatch.setenv("GEMINI_CLI_SYSTEM_SETTINGS_PATH", str(tmp_path / "none.json"))


@pytest.fixture
def h(db_path: Path) -> Iterator[Harness]:
    harness = Harness(str(db_path), "eagle3", announce=False)
    yield harness
    harness.close()


def base(event: str, tmp_path: Path | None = None, **kw: Any) -> dict[str, Any]:
    transcript = (tmp_path / "chats" / "session-2026-12-04T18-12-4666e9a2.jsonl"
                  if tmp_path else Path("/nowhere/session.jsonl"))
    return {"session_id": GEMINI_SESSION, "transcript_path": str(transcript),
            "cwd": "/work/eagle3", "hook_event_name": event,
            "timestamp": "2026-12-04T18:12:13.000Z", **kw}


def after_tool(tool: str, args: dict[str, Any], output: str = "", *,
               error: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"llmContent": output if error is None else error,
                                "returnDisplay": {"todos": []}}
    if error is not None:
        response["error"] = {"message": error, "type": "execution_failed"}
    return base("AfterTool", tool_name=tool, tool_input=args, tool_response=response)


def context(answer: str | None, event: str) -> str:
    assert answer is not None
    out = json.loads(answer)
    assert out == {"hookSpecificOutput": {"hookEventName": event,
                                          "additionalContext": out["hookSpecificOutput"]
                                          ["additionalContext"]}}
    return str(out["hookSpecificOutput"]["additionalContext"])


def listed(h: Harness) -> list[tuple[int, str, str, str, list[int]]]:
    return [(t.num, t.content, t.status, t.priority, t.depends_on)
            for t in sorted(h.store.todos(h.session().id), key=lambda t: t.position)]


def plan(h: Harness) -> None:
    """Three tracker tasks, the second and third each depending on the one before."""
    for i, (tid, title, deps) in enumerate([("aa0001", "Regenerate samples", []),
                                            ("aa0002", "Build the vocab mapping", ["aa0001"]),
                                            ("aa0003", "Train the drafter", ["aa0002"])]):
        args = {"title": title, "description": f"step {i + 1}", "type": "task",
                "dependencies": deps}
        gemini.handle(after_tool("tracker_create_task", args, f"Created task {tid}: {title}"),
                      h)


def test_tracker_tasks_statuses_and_dependencies(h: Harness) -> None:
    plan(h)
    assert listed(h) == [(1, "Regenerate samples", "pending", "medium", []),
                         (2, "Build the vocab mapping", "pending", "medium", [1]),
                         (3, "Train the drafter", "pending", "medium", [2])]
    gemini.handle(after_tool("tracker_update_task", {"id": "aa0001", "status": "in_progress"},
                             "Updated task aa0001. Status: in_progress"), h)
    gemini.handle(after_tool("tracker_update_task", {"id": "aa0001", "status": "closed"},
                             "Updated task aa0001. Status: closed"), h)
    gemini.handle(after_tool("tracker_update_task", {"id": "aa0002", "status": "blocked",
                                                     "title": "Build d2t and t2d"},
                             "Updated task aa0002. Status: blocked"), h)
    # The third task's whole new list: it now waits on the first instead.
    gemini.handle(after_tool("tracker_update_task", {"id": "aa0003", "dependencies": ["aa0001"]},
                             "Updated task aa0003. Status: open"), h)
    gemini.handle(after_tool("tracker_add_dependency", {"taskId": "aa0003",
                                                        "dependencyId": "aa0002"},
                             "Linked aa0003 -> aa0002."), h)
    assert listed(h) == [(1, "Regenerate samples", "completed", "medium", []),
                         (2, "Build d2t and t2d", "blocked", "medium", [1]),
                         (3, "Train the drafter", "pending", "medium", [1, 2])]
    notes = [e.payload["text"] for e in h.store.events(h.session().id)
             if e.kind == "todo.noted"]
    assert notes == ["step 1", "step 2", "step 3"]


def test_refused_and_repeated_calls_change_nothing(h: Harness, tmp_path: Path) -> None:
    plan(h)
    before = h.store.last_n(h.session().id)
    # The tool refused them (Gemini CLI's own checks): the tracker did not change.
    gemini.handle(after_tool("tracker_update_task", {"id": "aa0003", "status": "closed"},
                             error="Cannot close task aa0003 because dependency aa0002 is "
                                   "still open."), h)
    gemini.handle(after_tool("tracker_add_dependency", {"taskId": "aa0001",
                                                        "dependencyId": "aa0003"},
                             error="Circular dependency detected involving task aa0001."), h)
    gemini.handle(after_tool("tracker_create_task", {"title": "Regenerate samples",
                                                     "description": "step 1", "type": "task"},
                             "Created task aa0001: Regenerate samples"), h)  # twice
    gemini.handle(after_tool("tracker_list_tasks", {}, "- [aa0001] Regenerate samples (open)"),
                  h)
    assert h.store.last_n(h.session().id) == before


def test_a_new_gemini_session_takes_up_the_stored_todo(h: Harness) -> None:
    plan(h)
    other = dict(after_tool("tracker_create_task", {"title": "train the drafter",
                                                    "description": "again", "type": "task"},
                            "Created task bb0001: train the drafter"),
                 session_id="new-session")
    gemini.handle(other, h)
    gemini.handle(dict(after_tool("tracker_update_task", {"id": "bb0001",
                                                          "status": "in_progress"},
                                  "Updated task bb0001. Status: in_progress"),
                       session_id="new-session"), h)
    assert [t[1:3] for t in listed(h)] == [("Regenerate samples", "pending"),
                                          ("Build the vocab mapping", "pending"),
                                          ("Train the drafter", "in_progress")]


def test_a_persons_change_is_told_once_named_by_the_tracker_id(h: Harness) -> None:
    plan(h)
    sid = h.session().id
    assert gemini.handle(after_tool("read_file", {"file_path": "a.py"}, "x = 1"), h) is None
    uc.set_priority(h.store, sid, "t3", "high")
    uc.set_status(h.store, sid, "t2", "blocked", reason="waiting for the 10K set")
    told = context(gemini.handle(after_tool("read_file", {"file_path": "a.py"}, "x = 1"), h),
                   "AfterTool")
    # Gemini CLI writes < and > as entities: our arrows are characters it leaves alone.
    assert told.splitlines()[1:] == [
        "- task aa0003 \"Train the drafter\" (t3): priority 'medium' \u2192 'high' by human",
        "- task aa0002 \"Build the vocab mapping\" (t2): status 'pending' \u2192 'blocked' "
        "('waiting for the 10K set') by human"]
    assert ">" not in told
    assert gemini.handle(base("BeforeAgent", prompt="go on"), h) is None  # told once


def test_write_todos_merges_and_names_items_by_place(h: Harness) -> None:
    def write(*items: tuple[str, str]) -> None:
        gemini.handle(after_tool("write_todos", {"todos": [
            {"description": d, "status": s} for d, s in items]}, "Successfully updated"), h)

    write(("Regenerate samples", "in_progress"), ("Train the drafter", "pending"))
    uc.set_priority(h.store, h.session().id, "t2", "high")
    told = context(gemini.handle(base("BeforeAgent", prompt="go on"), h), "BeforeAgent")
    assert "- item 2 \"Train the drafter\" (t2): priority 'medium' \u2192 'high' by human" \
        in told
    write(("Regenerate samples", "completed"), ("Train the drafter", "blocked"),
          ("Write the report", "cancelled"))
    assert [t[1:4] for t in listed(h)] == [("Regenerate samples", "completed", "medium"),
                                          ("Train the drafter", "blocked", "high"),
                                          ("Write the report", "cancelled", "medium")]


def test_session_start_gives_the_list_back_and_clear_owes_it(h: Harness) -> None:
    assert gemini.handle(base("SessionStart", source="startup"), h) is None  # empty list
    plan(h)
    back = context(gemini.handle(base("SessionStart", source="resume"), h), "SessionStart")
    assert back.startswith("Todo list (session eagle3): 0/3 completed.")
    assert "[ ] t3 Train the drafter (medium) - waiting on t2" in back
    # /clear: Gemini CLI drops SessionStart's context, so the next prompt carries the list.
    assert gemini.handle(base("SessionStart", source="clear"), h) is None
    again = context(gemini.handle(base("BeforeAgent", prompt="go on"), h), "BeforeAgent")
    assert again == back
    assert gemini.handle(base("BeforeAgent", prompt="and on"), h) is None
    cuts = [e.payload["cut"] for e in h.store.events(h.session().id)
            if e.kind == "agent.context"]
    assert cuts == ["startup", "resume", "clear"]


def write_transcript(tmp_path: Path, *records: dict[str, Any]) -> None:
    path = tmp_path / "chats" / "session-2026-12-04T18-12-4666e9a2.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {"sessionId": GEMINI_SESSION, "projectHash": "ab" * 32,
            "startTime": "2026-12-04T18:12:08.000Z", "kind": "main"}
    path.write_text("".join(json.dumps(r) + "\n" for r in (head, *records)))


def answer(tokens: int, model: str = "gemini-3.8-flash") -> dict[str, Any]:
    return {"id": f"m{tokens}", "timestamp": "2026-12-04T18:12:10.000Z", "type": "gemini",
            "content": "", "tokens": {"input": tokens, "output": 20, "cached": 0,
                                      "thoughts": 0, "tool": 0, "total": tokens + 20},
            "model": model}


def test_a_due_compression_sends_the_list_on_the_answer_before_it(h: Harness,
                                                                  tmp_path: Path) -> None:
    plan(h)
    write_transcript(tmp_path, answer(200))
    pre = base("PreCompress", tmp_path, trigger="auto")
    gemini.handle(pre, h)  # before every request: nothing due, nothing recorded
    assert not any(e.kind == "agent.context" for e in h.store.events(h.session().id))
    write_transcript(tmp_path, answer(200), answer(600_000))  # past half the window
    got = gemini.handle({**after_tool("read_file", {}, "x"), "transcript_path":
                         pre["transcript_path"]}, h)
    assert context(got, "AfterTool").startswith("Todo list (session eagle3): 0/3")
    gemini.handle(pre, h)
    cuts = [(e.payload["cut"], e.payload.get("trigger"))
            for e in h.store.events(h.session().id) if e.kind == "agent.context"]
    assert cuts == [("compact", "auto")]


def test_compress_by_hand_owes_the_list_to_the_next_prompt(h: Harness) -> None:
    plan(h)
    gemini.handle(base("PreCompress", trigger="manual"), h)
    back = context(gemini.handle(base("BeforeAgent", prompt="go on"), h), "BeforeAgent")
    assert back.startswith("Todo list (session eagle3): 0/3 completed.")


def test_when_a_compression_is_due(tmp_path: Path) -> None:
    path = tmp_path / "chats" / "session-2026-12-04T18-12-4666e9a2.jsonl"
    payload = base("AfterTool", tmp_path, cwd=str(tmp_path / "project"))
    assert not compression_due(payload)  # no transcript yet
    write_transcript(tmp_path, answer(524_288))
    assert last_prompt_tokens(path) == (524_288, "gemini-3.8-flash")
    assert compression_due(payload)
    write_transcript(tmp_path, answer(200_000, "gemma-4-31b-it"))
    assert compression_due(payload)  # a quarter of the window for Gemma 4
    # The history was written again after the answer (a compression, a resume): the count
    # no longer holds.
    write_transcript(tmp_path, answer(600_000), {"$set": {"messages": []}})
    assert last_prompt_tokens(path) is None and not compression_due(payload)
    # The project's setting is Gemini CLI's threshold.
    write_transcript(tmp_path, answer(300_000))
    assert not compression_due(payload)
    settings = tmp_path / "project" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"model": {"compressionThreshold": 0.2}}))
    assert compression_due(payload)


def test_the_hook_never_fails_gemini(db_path: Path, tmp_path: Path) -> None:
    env = {"HARNESS_DB": str(db_path), "HARNESS_SESSION": "eagle3"}
    bad = after_tool("tracker_update_task", {"id": "zz9999", "status": "done"},
                     "Updated task zz9999. Status: done")
    for stdin in (json.dumps(bad).encode(), b"[1, 2]", b"not json"):
        r = harness_subprocess(["hook", "gemini-cli"], stdin=stdin, env=env)
        assert r.returncode == 0 and r.stdout == b"", r.stderr
    log = (tmp_path / "data" / "logs" / "hooks.log").read_text()
    assert "tracker_update_task.status: unknown status 'done'" in log
    assert "hook payload must be a JSON object" in log
    good = after_tool("tracker_create_task", {"title": "Train", "description": "d",
                                              "type": "task"}, "Created task cc0001: Train")
    r = harness_subprocess(["hook", "gemini-cli"], stdin=json.dumps(good).encode(), env=env)
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == b""
    with Store.open(str(db_path)) as s:
        row = s.session_by_name("eagle3")
        assert row is not None and [t.content for t in s.todos(row.id)] == ["Train"]


def test_the_write_todos_shape() -> None:
    from harness import formats
    from harness.errors import InputError

    write = formats.parse({"todos": [{"description": "Train the drafter", "status": "blocked"},
                                     {"description": "Report", "status": "cancelled"}]})
    assert write.caps is formats.GEMINI
    assert [(i.content, i.status) for i in write.items] == [("Train the drafter", "blocked"),
                                                            ("Report", "cancelled")]
    view = [formats.ViewItem(1, "Train the drafter", "blocked")]
    assert formats.render_list(view, formats.GEMINI) == {
        "todos": [{"description": "Train the drafter", "status": "blocked"}]}
    with pytest.raises(InputError, match=r"todos\[0\].status: unknown status 'done' for "
                                         r"gemini \(expected one of pending, in_progress, "
                                         r"completed, cancelled, blocked\)"):
        formats.parse({"todos": [{"description": "x", "status": "done"}]}, "gemini")
