"""`harness watch-codex` following real rollout files while Codex (here, the test) writes
them: plan calls appear in the store once each, across restarts, partial lines and all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from state.store import Store
from tests.conftest import ROOT, harness_subprocess

SESSION_META = {"timestamp": "2025-10-01T09:00:00.000Z", "type": "session_meta",
                "payload": {"id": "0199a1b2-c3d4", "cwd": "/work/eagle3", "cli_version": "0.44.0"}}


def plan_line(call_id: str, steps: list[tuple[str, str]], ts: str,
              explanation: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"plan": [{"step": s, "status": st} for s, st in steps]}
    if explanation:
        args["explanation"] = explanation
    return {"timestamp": ts, "type": "response_item",
            "payload": {"type": "function_call", "name": "update_plan",
                        "arguments": json.dumps(args), "call_id": call_id}}


def other_line(ts: str) -> dict[str, Any]:
    return {"timestamp": ts, "type": "response_item",
            "payload": {"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": "Working on it."}]}}


def append(path: Path, *objs: dict[str, Any], partial: bytes = b"") -> None:
    with path.open("ab") as fh:
        for obj in objs:
            fh.write(json.dumps(obj).encode() + b"\n")
        fh.write(partial)


def state(db: Path) -> tuple[list[tuple[str, str]], list]:
    if not db.exists():
        return [], []
    with Store.open(str(db)) as s:
        row = s.session_by_name("default")
        if row is None:
            return [], []
        todos = sorted(s.todos(row.id), key=lambda t: (t.position, t.num))
        return [(t.content, t.status) for t in todos], s.events(row.id)


def wait_for(db: Path, expected: list[tuple[str, str]], timeout: float = 30) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        todos, events = state(db)
        if todos == expected:
            return events
        time.sleep(0.1)
    raise AssertionError(f"store never reached {expected}; it has {state(db)[0]}")


def start(db: Path, root: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db)}
    return subprocess.Popen([sys.executable, "-m", "harness", "watch-codex", str(root),
                             "--interval", "0.1", *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    out, _err = proc.communicate(timeout=30)
    return out.decode()


def test_follows_a_rollout_as_it_is_written_and_resumes_after_a_restart(
        db_path: Path, tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    day = root / "2025" / "10" / "01"
    day.mkdir(parents=True)
    rollout = day / "rollout-2025-10-01T09-00-00-0199a1b2-c3d4.jsonl"
    proc = start(db_path, root)
    book = tmp_path / "data" / "watch-codex.json"
    try:
        # The watcher is up (it has recorded the rollouts already there: none) before
        # Codex starts writing; a rollout there before its first start would be skipped.
        deadline = time.monotonic() + 60
        while not book.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "watcher never started"
            time.sleep(0.05)
        steps = [("Generate synthetic data", "in_progress"), ("Build vocab mapping", "pending")]
        append(rollout, SESSION_META, other_line("2025-10-01T09:00:01.000Z"),
               plan_line("call_1", steps, "2025-10-01T09:00:02.000Z", "starting"))
        wait_for(db_path, steps)
        # A line Codex is half-way through writing is not read until it is whole.
        steps2 = [("Generate synthetic data", "completed"), ("Build vocab mapping", "in_progress")]
        line = json.dumps(plan_line("call_2", steps2, "2025-10-01T09:05:00.000Z")).encode()
        append(rollout, partial=line[:40])
        time.sleep(0.6)
        assert state(db_path)[0] == steps
        with rollout.open("ab") as fh:
            fh.write(line[40:] + b"\n")
        wait_for(db_path, steps2)
    finally:
        out = stop(proc)
    assert "call_1: 2 step(s), 2 event(s)" in out and "call_2: 2 step(s)" in out

    # While the watcher is down: one more call in the old rollout, and a new rollout.
    steps3 = [("Generate synthetic data", "completed"), ("Build vocab mapping", "completed"),
              ("Train the drafter", "in_progress")]
    append(rollout, plan_line("call_3", steps3, "2025-10-01T09:20:00.000Z"))
    day2 = root / "2025" / "10" / "02"
    day2.mkdir(parents=True)
    steps4 = [*steps3[:2], ("Train the drafter", "completed"), ("Export", "pending")]
    append(day2 / "rollout-2025-10-02T08-00-00-0199ffff.jsonl", SESSION_META,
           {"timestamp": "2025-10-02T08:00:01Z", "type": "response_item",
            "payload": {"type": "function_call", "name": "update_plan",
                        "arguments": "{not json", "call_id": "call_bad"}},
           plan_line("call_4", steps4, "2025-10-02T08:00:02.000Z"))
    r = harness_subprocess(["watch-codex", str(root), "--once"],
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0, r.stderr
    events = wait_for(db_path, steps4, timeout=1)
    # Every call once: the restart neither repeated call_1/call_2 nor skipped call_3.
    refs = [e.ref for e in events if e.kind == "todo.created"]
    assert refs == ["call_1", "call_1", "call_3", "call_4"]
    assert {e.actor for e in events if e.kind.startswith("todo.")} == {"agent:codex"}
    # The rollout's own timestamps are the events' times.
    assert next(e.ts for e in events if e.ref == "call_1") == "2025-10-01T09:00:02.000000Z"
    assert "skipped rollout-2025-10-02T08-00-00-0199ffff.jsonl:call_bad" in r.stdout.decode()
    # A third pass finds nothing new.
    r = harness_subprocess(["watch-codex", str(root), "--once"],
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0 and r.stdout == b""
    assert len(state(db_path)[1]) == len(events)


def test_first_watch_skips_old_rollouts_unless_backfill(db_path: Path, tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    old = root / "2025" / "09" / "30"
    old.mkdir(parents=True)
    append(old / "rollout-old.jsonl", SESSION_META,
           plan_line("call_old", [("An old plan", "completed")], "2025-09-30T10:00:00Z"))
    r = harness_subprocess(["watch-codex", str(root), "--once"],
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0, r.stderr
    assert b"skipped 1 existing rollout(s)" in r.stdout
    assert state(db_path)[0] == []
    other = tmp_path / "other.db"
    r = harness_subprocess(["watch-codex", str(root), "--once", "--backfill"],
                           env={"HARNESS_DB": str(other)})
    assert r.returncode == 0, r.stderr
    assert state(other)[0] == [("An old plan", "completed")]


def test_missing_directory_is_a_one_line_error(tmp_path: Path, db_path: Path) -> None:
    r = harness_subprocess(["watch-codex", str(tmp_path / "nope")],
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 2
    assert r.stderr.decode().count("\n") == 1 and "does not exist" in r.stderr.decode()


CODEX_DATA = ROOT / "tests" / "data" / "codex"


def test_a_call_codex_refused_is_skipped_as_the_hooks_skip_it(db_path: Path,
                                                              tmp_path: Path) -> None:
    # Two rollouts written by Codex 0.171.0 itself (tests/data/codex/, long texts trimmed):
    # the same update_plan call, answered "unsupported call: update_plan" while
    # [tools.update_plan] was off, and "Plan updated" once it was on.
    root = tmp_path / "sessions"
    day = root / "2026" / "12" / "02"
    day.mkdir(parents=True)
    refused = day / "rollout-refused.jsonl"
    refused.write_bytes((CODEX_DATA / "rollout-update-plan-refused.jsonl").read_bytes())
    r = harness_subprocess(["watch-codex", str(root), "--once", "--backfill"],
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0, r.stderr
    assert "refused by Codex (unsupported call: update_plan)" in r.stdout.decode()
    assert state(db_path)[0] == []
    (day / "rollout-enabled.jsonl").write_bytes(
        (CODEX_DATA / "rollout-update-plan-enabled.jsonl").read_bytes())
    r = harness_subprocess(["watch-codex", str(root), "--once"],
                           env={"HARNESS_DB": str(db_path)})
    assert r.returncode == 0, r.stderr
    assert state(db_path)[0] == [("Regenerate samples", "in_progress"),
                                 ("Train drafter", "pending")]


def test_a_call_waits_for_its_answer_while_the_rollout_grows(db_path: Path,
                                                             tmp_path: Path) -> None:
    lines = (CODEX_DATA / "rollout-update-plan-refused.jsonl").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"function_call_output"' in line)
    root = tmp_path / "sessions"
    root.mkdir()
    rollout = root / "rollout-2026-12-02T15-35-03-x.jsonl"
    proc = start(db_path, root, "--backfill")
    try:
        rollout.write_text("\n".join(lines[:at]) + "\n")  # the call, not yet its answer
        time.sleep(0.5)
        with rollout.open("a") as fh:
            fh.write("\n".join(lines[at:]) + "\n")
        deadline = time.monotonic() + 30
        log = tmp_path / "data" / "logs" / "watch-codex.log"
        while not (log.exists() and "refused by Codex" in log.read_text()):
            assert time.monotonic() < deadline, "the refused call was never decided"
            time.sleep(0.1)
    finally:
        stop(proc)
    assert state(db_path)[0] == []
