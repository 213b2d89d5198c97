"""The todo commands through the real CLI entry point, and every bad input of the issue."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import harness_subprocess


def events(cli) -> list[dict]:
    r = cli(["log", "--json"])
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_add_list_show_and_history(cli) -> None:
    assert cli(["add", "Generate 10K samples", "-p", "H", "--stage", "generate"]).code == 0
    assert cli(["add", "Train drafter", "--depends", "t1"]).code == 0
    assert cli(["add", "Write report", "-p", "low"]).code == 0
    listing = json.loads(cli(["list", "--json"]).out)
    assert [t["id"] for t in listing] == ["t1", "t2", "t3"]
    assert listing[1]["waiting_on"] == ["t1"]
    assert listing[0]["stage"] == "generate"
    assert cli(["start", "t1"]).code == 0
    assert cli(["done", "t1"]).code == 0
    listing = json.loads(cli(["list", "--json"]).out)
    # in progress/pending first, completed last; waiting cleared once t1 is completed.
    assert [t["id"] for t in listing] == ["t2", "t3", "t1"]
    assert listing[0]["waiting_on"] == []
    text = cli(["list"]).out
    assert "Completed (1)" in text and "Pending (2)" in text
    shown = json.loads(cli(["show", "t1", "--json"]).out)
    kinds = [(h["kind"], h["actor"]) for h in shown["history"]]
    assert kinds == [("todo.created", "human"), ("todo.updated", "human"),
                     ("todo.updated", "human")]
    assert shown["history"][-1]["payload"]["changes"]["status"] == ["in_progress", "completed"]


def test_status_priority_move_edit_note_block(cli) -> None:
    for text in ("a", "b", "c"):
        cli(["add", text])
    assert cli(["block", "t2", "--reason", "waiting for GPU"]).code == 0
    listing = {t["id"]: t for t in json.loads(cli(["list", "--json"]).out)}
    assert listing["t2"]["status"] == "blocked"
    assert listing["t2"]["blocked_reason"] == "waiting for GPU"
    assert cli(["unblock", "t2"]).code == 0
    listing = {t["id"]: t for t in json.loads(cli(["list", "--json"]).out)}
    assert listing["t2"]["status"] == "pending" and listing["t2"]["blocked_reason"] is None
    assert cli(["prio", "t3", "H"]).code == 0
    assert cli(["prio", "t1", "down"]).code == 0
    order = [t["id"] for t in json.loads(cli(["list", "--json"]).out)]
    assert order == ["t3", "t2", "t1"]
    assert cli(["move", "t2", "--up"]).code == 0  # alone in its priority: no change
    assert "nothing changed" in cli(["move", "t2", "--up"]).out
    cli(["prio", "t2", "high"])
    assert cli(["move", "t2", "--up"]).code == 0
    order = [t["id"] for t in json.loads(cli(["list", "--json"]).out)]
    assert order == ["t2", "t3", "t1"]
    assert cli(["move", "t2", "--to", "2"]).code == 0
    assert [t["id"] for t in json.loads(cli(["list", "--json"]).out)] == ["t3", "t2", "t1"]
    assert cli(["edit", "t1", "a, reworded"]).code == 0
    assert cli(["note", "t1", "checked on the H200"]).code == 0
    shown = json.loads(cli(["show", "t1", "--json"]).out)
    assert shown["content"] == "a, reworded"
    assert shown["notes"][0]["text"] == "checked on the H200"
    assert cli(["cancel", "t1"]).code == 0
    assert "already cancelled" in cli(["cancel", "t1"]).out


def test_text_is_stored_exactly_and_shown_neutralised(cli) -> None:
    nasty = "línea 1 — ünïcode ✓\nline 2 \x1b[31mred\x1b[0m \x1b]0;title\x07 [bold]x[/bold]"
    assert cli(["add", nasty]).code == 0
    shown = json.loads(cli(["show", "t1", "--json"]).out)
    assert shown["content"] == nasty
    listing = cli(["list"]).out
    assert "\x1b" not in listing and "\x07" not in listing
    assert "\\x1b[31mred" in listing and "⏎" in listing and "[bold]x[" in listing
    text = cli(["show", "t1"]).out
    assert "\x1b" not in text and "línea 1 — ünïcode ✓\nline 2" in text


def test_sessions(cli) -> None:
    assert cli(["add", "in default"]).code == 0
    assert cli(["session", "new", "campaign"]).code == 0
    assert cli(["add", "in campaign"]).code == 0
    sessions = json.loads(cli(["session", "list", "--json"]).out)
    assert [(s["name"], s["current"], s["todos"]) for s in sessions] == [
        ("default", False, 1), ("campaign", True, 1)]
    assert json.loads(cli(["list", "--json", "--session", "default"]).out)[0]["content"] == \
        "in default"
    assert cli(["session", "use", "default"]).code == 0
    assert json.loads(cli(["list", "--json"]).out)[0]["content"] == "in default"
    r = cli(["list", "--session", "nope"])
    assert r.code == 1 and "no session named 'nope'" in r.err
    r = cli(["session", "new", "campaign"])
    assert r.code == 1 and "already exists" in r.err


def test_session_from_environment(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    cli(["session", "new", "env-one", "--no-use"])
    monkeypatch.setenv("HARNESS_SESSION", "env-one")
    cli(["add", "x"])
    where = json.loads(cli(["where", "--json"]).out)
    assert where["session"] == "env-one" and where["session_from"] == "HARNESS_SESSION"
    assert [(s["name"], s["todos"]) for s in json.loads(cli(["session", "list", "--json"]).out)] == [("env-one", 1)]


@pytest.mark.sqlite
def test_store_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli) -> None:
    monkeypatch.delenv("HARNESS_DB")
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    monkeypatch.chdir(project)
    assert cli(["init"]).code == 0
    monkeypatch.chdir(project / "sub")
    where = json.loads(cli(["where", "--json"]).out)
    assert where["store"] == str(project / ".harness" / "state.db")
    monkeypatch.setenv("HARNESS_DB", str(tmp_path / "env.db"))
    assert json.loads(cli(["where", "--json"]).out)["store"] == str(tmp_path / "env.db")
    other = tmp_path / "flag.db"
    assert json.loads(cli(["--db", str(other), "where", "--json"]).out)["store"] == str(other)
    assert json.loads(cli(["where", "--json", "--db", str(other)]).out)["store_from"] == "--db"
    monkeypatch.delenv("HARNESS_DB")
    monkeypatch.chdir(tmp_path)
    assert json.loads(cli(["where", "--json"]).out)["store"] == \
        str(tmp_path / "data" / "state.db")


# -- bad input: a one-line error naming the problem and the place, non-zero exit, no write --

def _assert_one_line_error(r, code: int, *needles: str) -> None:
    assert r.code == code, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.err
    assert "Traceback" not in r.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("payload, needles", [
    ('{"todos": [', ["stdin: malformed JSON at line 1"]),
    ('{"todos":[{"content":"x","status":"finished","priority":"high"}]}',
     ["stdin: todos[0].status: unknown status 'finished'"]),
    ('{"todos":[{"content":"x","status":"pending","priority":"urgent"}]}',
     ["todos[0].priority: unknown priority 'urgent'"]),
    ('{"todos":[{"id":"1","content":"x","status":"pending","priority":"high"},'
     '{"id":"1","content":"y","status":"pending","priority":"high"}]}',
     ["todos[1].id: duplicate id '1'"]),
    ('{"todos":[{"status":"pending","priority":"high"}]}', ["todos[0]: missing content"]),
    ('', ["stdin: empty payload"]),
    ('\xff\xfe', ["not UTF-8"]),
])
def test_bad_todowrite_payloads(cli, payload: str, needles: list[str]) -> None:
    cli(["add", "existing"])
    before = events(cli)
    data = payload.encode("latin-1") if payload.startswith("\xff") else payload.encode()
    r = cli(["todowrite"], data)
    _assert_one_line_error(r, 1, *needles)
    assert events(cli) == before


def test_ten_megabyte_payload_is_refused(cli) -> None:
    cli(["add", "existing"])
    before = events(cli)
    big = json.dumps({"todos": [{"content": "x" * 1000, "status": "pending",
                                 "priority": "high"}] * 10_000})
    assert len(big) > 10_000_000
    r = cli(["todowrite"], big)
    _assert_one_line_error(r, 1, "stdin: payload larger than")
    assert events(cli) == before


def test_unknown_todo_id_and_bad_values(cli) -> None:
    cli(["add", "existing"])
    before = events(cli)
    _assert_one_line_error(cli(["done", "t99"]), 1, "session default: unknown todo t99")
    _assert_one_line_error(cli(["done", "banana"]), 2, "not a todo id: 'banana'")
    _assert_one_line_error(cli(["add", "x", "--depends", "t42"]), 1, "unknown todo t42")
    _assert_one_line_error(cli(["prio", "t1", "urgent"]), 2, "harness prio")
    _assert_one_line_error(cli(["list", "--status", "finished"]), 2, "harness list")
    _assert_one_line_error(cli(["move", "t1"]), 2, "exactly one of --up, --down or --to")
    _assert_one_line_error(cli(["block", "t1", "--reason", " "]), 2, "needs a reason")
    assert events(cli) == before


def test_dependency_cycle_is_refused(cli) -> None:
    cli(["add", "a"])
    cli(["add", "b", "--depends", "t1"])
    before = events(cli)
    _assert_one_line_error(cli(["depend", "t1", "t2"]), 1, "makes a cycle")
    assert events(cli) == before


def test_not_a_database(tmp_path: Path, cli, db_path: Path) -> None:
    db_path.write_bytes(b"this is not sqlite" * 100)
    _assert_one_line_error(cli(["list"]), 3, str(db_path), "not a harness store")
    assert db_path.read_bytes() == b"this is not sqlite" * 100
    _assert_one_line_error(cli(["--db", str(tmp_path), "list"]), 3, "is a directory")


def test_locked_database(cli, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli(["add", "existing"])
    before = events(cli)
    monkeypatch.setenv("HARNESS_BUSY_TIMEOUT_MS", "200")
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        _assert_one_line_error(cli(["add", "blocked write"]), 3, "database is locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert events(cli) == before


def test_database_from_a_newer_schema(cli, db_path: Path) -> None:
    cli(["add", "existing"])
    con = sqlite3.connect(db_path)
    con.execute("INSERT INTO migrations (name, applied_at) VALUES ('999_from_the_future', 'x')")
    con.commit()
    count = con.execute("SELECT count(*) FROM events").fetchone()[0]
    con.close()
    _assert_one_line_error(cli(["add", "x"]), 1, "newer than this harness", "999_from_the_future")
    con = sqlite3.connect(db_path)
    assert con.execute("SELECT count(*) FROM events").fetchone()[0] == count
    con.close()


def test_exit_codes_in_a_fresh_interpreter(tmp_path: Path) -> None:
    env = {"HARNESS_DB": str(tmp_path / "s.db"), "HARNESS_CONFIG_DIR": str(tmp_path / "c")}
    ok = harness_subprocess(["todowrite"], stdin=b'{"todos":[{"content":"a","status":"pending"}]}',
                            env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"todos": [{"content": "a", "status": "pending",
                                                "priority": "medium"}]}
    bad = harness_subprocess(["todowrite"], stdin=b"{nope", env=env)
    assert bad.returncode == 1 and bad.stderr.decode().startswith("error: stdin: malformed JSON")
    usage = harness_subprocess(["list", "--bogus"], env=env)
    assert usage.returncode == 2 and b"No such option" in usage.stderr
    down = harness_subprocess(["list"], env={**env, "HARNESS_DB":
                                             "postgresql+psycopg://u:secret@127.0.0.1:1/x"})
    assert down.returncode == 3, down.stderr
    assert b"secret" not in down.stderr and b"127.0.0.1" in down.stderr
