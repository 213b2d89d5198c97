"""A store's file as people meet it: where a new one may be made, files that are not a
store, read-only copies, and Ctrl-C or odd input at the worst moments (issue 17's torture
run). Each case used to end in a traceback, a silent new store, or a lost interrupt."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from state.errors import StoreUnavailable
from state.store import Store
from tests.conftest import ROOT, harness_subprocess

pytestmark = pytest.mark.sqlite


def one_line_error(r: subprocess.CompletedProcess) -> str:
    err = r.stderr.decode()
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


# -- where a store may be made ----------------------------------------------------------

def test_db_in_a_directory_that_does_not_exist_is_one_line_and_makes_nothing(
        tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "state.db"
    r = harness_subprocess(["--db", str(target), "list"])
    assert r.returncode == 3
    err = one_line_error(r)
    assert err.startswith(f"error: {target}: no such directory: {target.parent}")
    assert "harness --db PATH init" in err
    assert not (tmp_path / "no").exists()


def test_db_where_no_directory_can_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = harness_subprocess(["--db", str(blocker / "sub" / "state.db"), "init"])
    assert r.returncode == 3
    assert "(Not a directory)" in one_line_error(r)


def test_init_with_db_makes_the_store_and_its_directories(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state.db"
    r = harness_subprocess(["--db", str(target), "init"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == f"created store {target}"
    assert harness_subprocess(["--db", str(target), "init"]).stdout.decode().strip() == \
        f"using existing store {target}"


def test_a_new_store_from_db_is_announced(tmp_path: Path) -> None:
    target = tmp_path / "stat.db"  # mistyped: the store is state.db
    r = harness_subprocess(["--db", str(target), "list"])
    assert r.returncode == 0
    assert r.stderr.decode().strip() == (f"note: {target}: created a new, empty store "
                                         "(from --db)")
    again = harness_subprocess(["--db", str(target), "list"])
    assert again.returncode == 0 and again.stderr == b""


def test_concurrent_creation_makes_one_complete_store(tmp_path: Path) -> None:
    target = tmp_path / "state.db"
    procs = [subprocess.Popen([sys.executable, "-m", "harness", "--db", str(target), "add",
                               f"from {i}"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(4)]
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [0, 0, 0, 0], [p.stderr.read() for p in procs]  # type: ignore[union-attr]
    with Store.open(str(target)) as s:
        row = s.session_by_name("default")
        assert row is not None and len(s.todos(row.id)) == 4
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".state.db.new")] == []


# -- files that are not a store -----------------------------------------------------------

def test_an_empty_file_is_not_quietly_made_a_store(tmp_path: Path) -> None:
    target = tmp_path / "state.db"
    target.touch()
    r = harness_subprocess(["--db", str(target), "list"])
    assert r.returncode == 3
    assert "empty file (0 bytes): not a harness store" in one_line_error(r)
    assert target.stat().st_size == 0
    with pytest.raises(StoreUnavailable, match="empty file"):
        Store.open(str(target))


def test_another_programs_sqlite_database_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "app.db"
    conn = sqlite3.connect(target)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    r = harness_subprocess(["--db", str(target), "list"])
    assert r.returncode == 3
    assert "a SQLite database, but not a harness store (its tables: users)" in one_line_error(r)
    conn = sqlite3.connect(target)
    assert [x[0] for x in conn.execute("SELECT name FROM sqlite_master")] == ["users"]
    conn.close()


# -- read-only stores ------------------------------------------------------------------------

def _read_only_run(directory: Path, argv: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    """Run the harness with ``directory`` mounted read-only (a backup, a colleague's copy)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "harness", *argv]
    if os.geteuid() != 0:
        return subprocess.run(cmd, input=stdin, env=env, capture_output=True, timeout=120)
    script = (f"mount --bind {directory} {directory} && "
              f"mount -o remount,bind,ro {directory} && exec \"$@\"")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script, "sh", *cmd], input=stdin, env=env, capture_output=True,
                          timeout=120)


def _make_read_only(db: Path) -> None:
    """Take away the write permissions of ``db`` and its directory (as root, where they
    mean nothing, :func:`_read_only_run` mounts the directory read-only instead)."""
    if os.geteuid() != 0:
        db.chmod(0o444)
        db.parent.chmod(0o555)
    probe = _read_only_run(db.parent, ["--version"])
    if probe.returncode != 0:
        db.parent.chmod(0o755)
        pytest.skip(f"cannot mount read-only here: {probe.stderr.decode()[:200]}")


@pytest.fixture
def read_only_copy(tmp_path: Path) -> Path:
    if os.geteuid() == 0 and shutil.which("unshare") is None:
        pytest.skip("needs unshare to mount a directory read-only")
    copy = tmp_path / "backup"
    copy.mkdir()
    db = copy / "state.db"
    assert harness_subprocess(["--db", str(db), "add", "Train the drafter", "-p", "high"]) \
        .returncode == 0
    assert harness_subprocess(["--db", str(db), "add", "Verify it"]).returncode == 0
    _make_read_only(db)
    yield db
    copy.chmod(0o755)


def test_a_read_only_store_shows_a_lease_that_ran_out(tmp_path: Path) -> None:
    """Reads end a lapsed lease by writing; a store nobody may write is only read: the
    lease shows as run out, and nothing fails."""
    if os.geteuid() == 0 and shutil.which("unshare") is None:
        pytest.skip("needs unshare to mount a directory read-only")
    from harness.agents.claims import next_ready

    db = tmp_path / "backup" / "state.db"
    db.parent.mkdir()
    with Store.open(str(db)) as store:
        sid = store.create_session("default", actor="human")
        with store.write(sid, "human") as tx:
            tx.create_todo("Train the drafter")
        next_ready(store, sid, claim=True, actor="w1", lease=0.05)
        now, leases = store.leases(sid)
        while leases[1].left(now) > 0:
            time.sleep(0.02)
            now, leases = store.leases(sid)
        n = store.last_n(sid)
    _make_read_only(db)
    try:
        r = _read_only_run(db.parent, ["--db", str(db), "list"])
        assert r.returncode == 0, r.stderr
        assert b"claimed by w1 \xc2\xb7 lease ran out" in r.stdout
        r = _read_only_run(db.parent, ["--db", str(db), "show", "t1"])
        assert r.returncode == 0 and b"; ended by the next write" in r.stdout, r.stderr
        r = _read_only_run(db.parent, ["--db", str(db), "todoread", "--format", "json"])
        assert r.returncode == 0 and json.loads(r.stdout)[0]["status"] == "in_progress"
    finally:
        db.parent.chmod(0o755)
    with Store.open(str(db)) as store:
        assert store.last_n(sid) == n


def test_a_read_only_store_can_be_read(read_only_copy: Path) -> None:
    db = str(read_only_copy)
    r = _read_only_run(read_only_copy.parent, ["--db", db, "list"])
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "Train the drafter" in out and "Verify it" in out
    r = _read_only_run(read_only_copy.parent, ["--db", db, "todoread", "--format", "json"])
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 2
    r = _read_only_run(read_only_copy.parent, ["--db", db, "log"])
    assert r.returncode == 0 and b"Train the drafter" in r.stdout


def test_writing_a_read_only_store_says_why(read_only_copy: Path) -> None:
    db = str(read_only_copy)
    r = _read_only_run(read_only_copy.parent, ["--db", db, "add", "more"])
    assert r.returncode == 3
    err = one_line_error(r)
    assert err.startswith(f"error: {db}: the store is read-only (you may not write")
    assert "harness db copy" in err
    r = _read_only_run(read_only_copy.parent, ["--db", db, "--session", "nope", "list"])
    assert r.returncode != 0 and "no session named 'nope'" in one_line_error(r)
    # A hook never fails the agent, even here: it logs why and exits 0.
    body = json.dumps({"hook_event_name": "PostToolUse", "tool_name": "TodoWrite",
                       "session_id": "s", "cwd": "/x",
                       "tool_input": {"todos": [{"content": "a", "status": "pending",
                                                 "activeForm": "a"}]}}).encode()
    r = _read_only_run(read_only_copy.parent, ["--db", db, "hook", "claude-code"], body)
    assert r.returncode == 0 and b"read-only" in r.stderr


# -- odd input, and Ctrl-C where it hurts ------------------------------------------------------

def test_json_nested_100000_deep_is_one_line(db_path: Path) -> None:
    deep = b'{"todos": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = harness_subprocess(["todowrite"], stdin=deep, env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 1
    assert one_line_error(r) == "error: stdin: JSON nested too deeply"
    hook = harness_subprocess(["hook", "claude-code"], stdin=deep,
                              env={"HARNESS_DB": str(db_path)})
    assert hook.returncode == 0 and b"nested too deeply" in hook.stderr
    path = db_path.parent / "deep.jsonl"
    path.write_bytes(b'{"type": "user", "sessionId": "s", "message": {"content": "TodoWrite"}}\n'
                     + b'{"x": "TodoWrite", "y": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    r = harness_subprocess(["import", str(path)], env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0 and b"Traceback" not in r.stderr
    assert b"JSON nested too deeply" in r.stderr


CLOSE_INTERRUPT = r"""
import os, signal, sys
from harness.cli.main import main
# Ctrl-C the moment the store's connections are being closed (the final WAL checkpoint).
def profile(frame, event, arg):
    if event == "c_call" and getattr(arg, "__name__", "") == "close" and \
            type(getattr(arg, "__self__", None)).__name__ == "Connection":
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGINT)
orig = __import__("harness.cli.hot", fromlist=["close"]).close
def close():
    sys.setprofile(profile)
    try:
        orig()
    finally:
        sys.setprofile(None)
__import__("harness.cli.hot", fromlist=["close"]).close = close
main(sys.argv[1:])
"""


def test_ctrl_c_during_the_stores_close_is_exit_130_not_a_traceback(db_path: Path) -> None:
    assert harness_subprocess(["add", "x"], env={"HARNESS_DB": str(db_path)}).returncode == 0
    r = subprocess.run([sys.executable, "-c", CLOSE_INTERRUPT, "todoread"],
                       env={**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)},
                       capture_output=True, timeout=120)
    assert r.returncode == 130, r.stderr
    assert one_line_error(r) == "error: interrupted"
    with Store.open(str(db_path)) as s:  # and the store is fine
        row = s.session_by_name("default")
        assert row is not None and [t.content for t in s.todos(row.id)] == ["x"]


GC_INTERRUPT = r"""
import gc, os, signal, sys, weakref
from harness.cli.main import main
class Pooled:  # what a pooled connection's finalizer looks like
    pass
def finalizer(_ref):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while a GC callback runs
    for _ in range(1000):
        pass  # the handler raises here, inside the callback
keep = []
def churn():
    obj = Pooled()
    keep.append(weakref.ref(obj, finalizer))
    del obj
orig = __import__("harness.cli.hot", fromlist=["todoread"]).todoread
def todoread(h, fmt):
    orig(h, fmt)
    churn()
__import__("harness.cli.hot", fromlist=["todoread"]).todoread = todoread
main(sys.argv[1:])
"""


def test_ctrl_c_inside_a_gc_callback_is_not_lost(db_path: Path) -> None:
    assert harness_subprocess(["add", "x"], env={"HARNESS_DB": str(db_path)}).returncode == 0
    r = subprocess.run([sys.executable, "-c", GC_INTERRUPT, "todoread"],
                       env={**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)},
                       capture_output=True, timeout=120)
    err = r.stderr.decode()
    assert "Exception ignored" not in err, err
    assert r.returncode == 130 and err.strip().splitlines()[-1] == "error: interrupted"


def test_unchanged_writes_do_not_restate_kept_items(cli, db_path: Path) -> None:
    agent = json.dumps({"todos": [{"content": "Train", "status": "pending",
                                   "priority": "high"}]})
    assert cli(["todowrite", "--actor", "a1"], agent).code == 0
    assert cli(["add", "Ask about the licence"]).code == 0
    first = cli(["todowrite", "--actor", "a1"], agent)
    assert "note: kept t2 'Ask about the licence'" in first.err
    again = cli(["todowrite", "--actor", "a1"], agent)
    assert again.code == 0 and "kept t2" not in again.err
    # Taking it up and leaving it out again is news once more.
    both = json.dumps({"todos": [{"content": "Train", "status": "pending", "priority": "high"},
                                 {"content": "Ask about the licence", "status": "pending",
                                  "priority": "medium"}]})
    assert "kept" not in cli(["todowrite", "--actor", "a1"], both).err
    assert "kept t2" in cli(["todowrite", "--actor", "a1"], agent).err
