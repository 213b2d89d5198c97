"""Importing Gemini CLI's saved chats (0.61's JSONL recording, an older version's single
JSON document) and its checkpoints (`/chat save`): write_todos merged as whole lists,
the task tracker's calls applied as its live hook applies them (statuses, dependencies,
a retitled task), calls the tool refused or that were cancelled skipped, a call written
again (a compression rewrites the history) counted once. The files in tests/data/gemini/
are written in the shapes the real Gemini CLI 0.61.0 wrote in tests/agents/real/ (whose
own recording is imported there too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.importers import detect, import_file
from state.store import Store
from tests.conftest import DATA

GEMINI = DATA / "gemini"
CHAT = GEMINI / "session-2026-12-04T10-00-3f2a9c1e.jsonl"
OLD_CHAT = GEMINI / "session-2026-11-30T09-12-77aa01bc.json"
CHECKPOINT = GEMINI / "checkpoint-drafter.json"


def todos(store: Store, session: str) -> list[tuple[str, str, list[int]]]:
    row = store.session_by_name(session)
    assert row is not None
    return [(t.content, t.status, t.depends_on)
            for t in sorted(store.todos(row.id), key=lambda t: t.position)]


@pytest.mark.parametrize("path, fmt", [(CHAT, "gemini-chat"), (OLD_CHAT, "gemini-chat"),
                                       (CHECKPOINT, "gemini-checkpoint")])
def test_detected_by_content(path: Path, fmt: str) -> None:
    assert detect(path.read_bytes()[:65536], str(path)) == fmt


def test_a_chat_recording_with_the_task_tracker(store: Store) -> None:
    r = import_file(store, CHAT)
    assert (r.format, r.session, r.session_created) == ("gemini-chat", "gemini-3f2a9c1e", True)
    assert (r.calls, r.imported, r.malformed_count) == (6, 6, 1)
    assert r.skipped["tracker_update_task refused by Gemini CLI (Task with ID ffffff not "
                     "found.)"] == 1
    assert r.malformed == [(15, "truncated or not a JSON object")]
    assert todos(store, "gemini-3f2a9c1e") == [
        ("Regenerate the 10K samples", "completed", []),
        ("Build the vocab mapping", "pending", [1]),
        ("Train the drafter", "pending", [2])]
    row = store.session_by_name("gemini-3f2a9c1e")
    assert row is not None
    events = store.events(row.id)
    assert {e.actor for e in events if e.kind.startswith("todo.")} == {"agent:gemini-cli"}
    closed = next(e for e in events if e.kind == "todo.updated"
                  and e.payload["changes"].get("status") == ["in_progress", "completed"])
    assert (closed.ref, closed.ts) == ("tracker_update_task_7", "2026-12-04T10:00:12.000000Z")
    notes = [e.payload["text"] for e in events if e.kind == "todo.noted"]
    assert notes == ["with the reasoning kept", "d2t and t2d from the 10K samples",
                     "3 epochs"]
    again = import_file(store, CHAT)
    assert (again.imported, again.already, again.events) == (0, 6, 0)


def test_an_older_single_document_chat_with_write_todos(store: Store) -> None:
    r = import_file(store, OLD_CHAT)
    assert (r.format, r.session, r.calls) == ("gemini-chat", "gemini-77aa01bc", 2)
    assert r.skipped["write_todos cancelled before it ran"] == 1
    assert todos(store, "gemini-77aa01bc") == [("Regenerate 10K samples", "completed", []),
                                               ("Train the drafter", "blocked", []),
                                               ("Write the report", "cancelled", [])]
    assert (r.first_ts, r.last_ts) == ("2026-11-30T09:12:06.000000Z",
                                       "2026-11-30T09:15:01.000000Z")


def test_a_chat_save_checkpoint(store: Store) -> None:
    r = import_file(store, CHECKPOINT)
    assert (r.format, r.session, r.calls) == ("gemini-checkpoint", "gemini-drafter", 4)
    assert "the transcript has no timestamps: used the file's time" in r.notes
    assert todos(store, "gemini-drafter") == [("Regenerate 10K samples", "in_progress", []),
                                              ("Train the drafter", "pending", [1])]


def test_a_tool_call_checkpoint_reads_its_client_history(store: Store, tmp_path: Path) -> None:
    history = json.loads(CHECKPOINT.read_text())["history"]
    path = tmp_path / "2026-12-04T10-00-05_000Z-train.py-replace.json"
    path.write_text(json.dumps({"history": [{"type": "user", "text": "plan"}],
                                "clientHistory": history, "commitHash": "ab12cd",
                                "toolCall": {"name": "replace", "args": {}},
                                "messageId": "p1"}, indent=2))
    r = import_file(store, path)
    assert (r.format, r.calls) == ("gemini-checkpoint", 4)


def test_strict_refuses_a_malformed_line_and_writes_nothing(store: Store) -> None:
    with pytest.raises(InputError, match=r":15: truncated or not a JSON object \(--strict"):
        import_file(store, CHAT, strict=True)
    assert store.session_by_name("gemini-3f2a9c1e") is None


def test_a_nul_in_a_tracker_call_skips_that_call(store: Store, tmp_path: Path) -> None:
    lines = CHAT.read_text().splitlines()
    lines[5] = lines[5].replace("with the reasoning kept", "with\\u0000NUL")
    path = tmp_path / CHAT.name
    path.write_text("\n".join(lines) + "\n")
    r = import_file(store, path)
    assert any("holds a NUL character" in reason for _, reason in r.malformed)
    assert [t[0] for t in todos(store, "gemini-3f2a9c1e")] == ["Build the vocab mapping",
                                                              "Train the drafter"]
