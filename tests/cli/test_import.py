"""Importing real and documented-shape transcripts, idempotency, bad input, export round trip."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness.importers import detect, import_file
from state.store import Store, normalize_ts
from tests.conftest import DATA, ROOT, harness_subprocess

CLAUDE = DATA / "claude-code-2.0.49-openroad-mcp.jsonl"
OPENCODE_MD = DATA / "opencode-export-arb4j.md"
CODEX = DATA / "codex-rollout-update-plan.jsonl"
STREAM = DATA / "claude-stream-todowrite.jsonl"
TASKS = DATA / "claude-code-tasks-2.1.jsonl"
OPENCODE_JSON = DATA / "opencode-export-session.json"
ACTION_LOG = DATA / "claude-code-action.log"
OPENCODE_NUL = DATA / "opencode-export-nul.md"


def _rows(store: Store, sid: int, n: int) -> list[tuple[str, str]]:
    """The list just after event n, by position: (content, status)."""
    return [(t.content, t.status) for t in store.state_at(sid, n).by_position()]


def _list_after_each_call(store: Store, sid: int, refs: list[str]) -> list[int]:
    """For each call (in order), the event number just after it (a call that changed
    nothing leaves the number where the previous call left it)."""
    events = store.events(sid)
    out, n = [], 1
    for ref in refs:
        n = max([e.n for e in events if e.ref == ref], default=n)
        out.append(n)
    return out


def _claude_calls() -> list[dict[str, Any]]:
    calls = []
    for line in CLAUDE.read_text().splitlines():
        obj = json.loads(line)
        content = obj.get("message", {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and block.get("name") == "TodoWrite":
                calls.append({"id": block["id"], "ts": obj["timestamp"],
                              "todos": block["input"]["todos"]})
        res = obj.get("toolUseResult")
        if isinstance(res, dict) and "newTodos" in res:
            tid = obj["message"]["content"][0]["tool_use_id"]
            next(c for c in calls if c["id"] == tid)["new"] = res["newTodos"]
    return calls


def test_claude_code_transcript_imports_exactly(store: Store) -> None:
    calls = _claude_calls()
    assert len(calls) == 7
    report = import_file(store, CLAUDE)
    assert (report.format, report.calls, report.imported) == ("claude-code", 7, 7)
    assert report.malformed_count == 0 and not report.skipped
    sid = store.session_by_name(report.session).id
    ns = _list_after_each_call(store, sid, [c["id"] for c in calls])
    for call, n in zip(calls, ns, strict=True):
        expected = [(t["content"], t["status"]) for t in call["todos"]]
        assert _rows(store, sid, n) == expected
        assert [(t["content"], t["status"]) for t in call["new"]] == expected
        forms = [t.active_form for t in store.state_at(sid, n).by_position()]
        assert forms == [t["activeForm"] for t in call["todos"]]
    by_ref = {e.ref: e.ts for e in store.events(sid) if e.ref}
    for call in calls:
        if call["id"] in by_ref:
            assert by_ref[call["id"]] == normalize_ts(call["ts"])
    assert {e.actor for e in store.events(sid)} == {"import", "agent:claude-code"}
    assert {t.origin for t in store.todos(sid)} == {"agent"}
    # The session starts at the transcript's first time.
    assert store.events(sid)[0].ts == normalize_ts("2025-11-21T11:37:13.127Z")


def _opencode_md_calls() -> list[list[dict[str, Any]]]:
    text = OPENCODE_MD.read_text()
    blocks = re.findall(r"\*\*Tool: todowrite\*\*\s+\*\*Input:\*\*\s+```json\n(.*?)\n```",
                        text, re.S)
    return [json.loads(b)["todos"] for b in blocks]


def test_opencode_markdown_export_imports_exactly(store: Store) -> None:
    calls = _opencode_md_calls()
    assert len(calls) == 5
    report = import_file(store, OPENCODE_MD)
    assert (report.format, report.calls, report.imported) == ("opencode-export", 5, 5)
    assert report.session == "opencode-093e1e9a8ffe"
    sid = store.session_by_name(report.session).id
    refs = [f"ses_093e1e9a8ffe0OmoccbZHOA8v6#todowrite{k}" for k in range(1, 6)]
    for todos, n in zip(calls, _list_after_each_call(store, sid, refs), strict=True):
        assert _rows(store, sid, n) == [(t["content"], t["status"]) for t in todos]
        prios = [t.priority for t in store.state_at(sid, n).by_position()]
        assert prios == [t["priority"] for t in todos]
    # No per-message times in the export: estimated inside [Created, Updated], in order,
    # from the exact UTC creation time in the default title.
    times = [e.ts for e in store.events(sid)]
    assert times == sorted(times)
    assert times[0] == normalize_ts("2026-07-16T18:08:58.967Z")
    assert all(normalize_ts("2026-07-16T18:08:58.967Z") <= t <=
               normalize_ts("2026-07-17T21:13:47Z") for t in times)
    assert any("estimated" in note for note in report.notes)


def test_codex_rollout(store: Store) -> None:
    report = import_file(store, CODEX)
    assert (report.format, report.calls, report.imported) == ("codex", 3, 3)
    assert report.session == "codex-0199a3b1"
    assert any("refused" in reason for reason in report.skipped)
    sid = store.session_by_name(report.session).id
    ns = _list_after_each_call(store, sid, ["call_plan_1", "call_plan_2", "call_plan_3"])
    assert _rows(store, sid, ns[0]) == [("Build the vocab mapping", "in_progress"),
                                        ("Train the drafter", "pending"),
                                        ("Measure acceptance in vLLM", "pending")]
    assert _rows(store, sid, ns[1])[:2] == [("Build the vocab mapping", "completed"),
                                            ("Train the drafter", "in_progress")]
    assert _rows(store, sid, ns[2]) == [
        ("Build the vocab mapping", "completed"), ("Train the drafter", "completed"),
        ("Measure acceptance in vLLM", "in_progress"),
        ("Compare with the no-speculation baseline", "pending")]
    ts = {e.ref: e.ts for e in store.events(sid) if e.ref}
    assert ts["call_plan_1"] == "2026-03-02T10:00:05.250000Z"
    assert ts["call_plan_3"] == "2026-03-02T12:41:02.125000Z"
    assert {e.actor for e in store.events(sid)} == {"import", "agent:codex"}


def test_claude_stream_json_with_pretty_printed_values(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "run.log"  # the name says nothing: detection reads the content
    shutil.copy(STREAM, path)
    os.utime(path, (1772445600, 1772445600))  # no times in stream-json: the file's is used
    report = import_file(store, path)
    assert (report.format, report.calls, report.imported) == ("claude-stream", 2, 2)
    assert report.session == "claude-5d1c9a7e"
    assert any("refused" in reason for reason in report.skipped)  # the is_error call
    sid = store.session_by_name(report.session).id
    assert _rows(store, sid, store.last_n(sid)) == [
        ("Generate 10K synthetic samples with reasoning kept", "completed"),
        ("Build the vocab mapping", "in_progress"), ("Train the EAGLE-3 drafter", "pending"),
        ("Measure acceptance with vLLM", "pending")]
    assert {e.ts for e in store.events(sid)} == {"2026-03-02T10:00:00.000000Z"}
    assert any("no timestamps" in n for n in report.notes)


def test_claude_task_tools_build_the_whole_list(store: Store) -> None:
    report = import_file(store, TASKS)
    assert (report.format, report.calls) == ("claude-code", 8)
    sid = store.session_by_name(report.session).id
    refs = [f"toolu_task_0{k}" for k in range(1, 9)]
    ns = _list_after_each_call(store, sid, refs)
    assert _rows(store, sid, ns[1]) == [("Write the SGLang speculative config", "pending"),
                                        ("Re-measure acceptance on 200 prompts", "pending")]
    assert ("Scratch: try k=5", "pending") in _rows(store, sid, ns[3])
    assert ("Scratch: try k=5", "pending") not in _rows(store, sid, ns[4])  # deleted
    final = store.state_at(sid).by_position()
    assert [(t.content, t.status) for t in final] == [
        ("Write the SGLang speculative config", "completed"),
        ("Re-measure acceptance on 200 prompts", "in_progress"),
        ("Compare with the vLLM numbers", "pending")]  # from the TaskList result
    assert final[1].active_form == "Measuring acceptance (k=3)"
    removed = [e for e in store.events(sid) if e.kind == "todo.removed"]
    assert [e.ref for e in removed] == ["toolu_task_05"]


def test_opencode_json_export(store: Store) -> None:
    report = import_file(store, OPENCODE_JSON)
    assert (report.format, report.calls, report.imported) == ("opencode-json", 3, 3)
    assert any("ended in error" in r for r in report.skipped)
    sid = store.session_by_name(report.session).id
    ns = _list_after_each_call(store, sid, ["call_oc_1", "call_oc_2", "call_oc_3"])
    assert _rows(store, sid, ns[0]) == [
        ("Fix reasoning reassembly in 01b_generate_synthetic.py", "in_progress"),
        ("Regenerate 10K samples", "pending"), ("Run vocab mapping", "pending")]
    assert ("Run vocab mapping", "cancelled") in _rows(store, sid, ns[2])
    ts = {e.ref: e.ts for e in store.events(sid) if e.ref}
    assert ts["call_oc_1"] == "2026-03-02T10:00:05.000000Z"  # state.time.start, epoch ms


@pytest.mark.parametrize("path,fmt", [(CLAUDE, "claude-code"), (OPENCODE_MD, "opencode-export"),
                                      (CODEX, "codex"), (STREAM, "claude-stream"),
                                      (TASKS, "claude-code"),
                                      (OPENCODE_JSON, "opencode-json"),
                                      (ACTION_LOG, "claude-action"),
                                      (OPENCODE_NUL, "opencode-export")])
def test_detection_reads_content_not_names(path: Path, fmt: str) -> None:
    assert detect(path.read_bytes()[:65536], str(path)) == fmt


def test_importing_twice_adds_nothing(cli, store: Store) -> None:
    first = cli(["import", str(CLAUDE), str(CODEX)])
    assert first.code == 0, first.err
    counts = store.session_counts()
    again = cli(["import", str(CLAUDE), str(CODEX)])
    assert again.code == 0
    assert again.out.count("already imported") == 2 and "nothing new" in again.out
    assert store.session_counts() == counts
    # Even into another session: the calls are known by their ids.
    other = cli(["import", str(CLAUDE), "--session", "elsewhere"])
    assert "already imported" in other.out and store.session_by_name("elsewhere") is None


def test_summary_names_session_calls_events_span_and_skips(cli, store: Store) -> None:
    r = cli(["import", str(CLAUDE)])
    assert r.code == 0
    assert "into session claude-060f3873 (new)" in r.out
    assert "7 todo calls -> 19 events" in r.out
    assert "2025-11-21 11:37:26 → 2025-11-21 11:54:50 (17m 24s)" in r.out
    assert "118 lines that are not todo calls" in r.out
    js = cli(["import", str(CODEX), "--json"])
    data = json.loads(js.out)[0]
    assert data["todo_calls"] == 3 and data["events"] == 8 and data["skipped"]


# -- bad input ------------------------------------------------------------------------

def _snapshot(db: Path) -> bytes:
    import sqlite3
    con = sqlite3.connect(db)
    try:
        return "\n".join(con.iterdump()).encode()
    finally:
        con.close()


def test_truncated_line_is_reported_and_skipped(cli, tmp_path: Path, store: Store) -> None:
    lines = CLAUDE.read_text().splitlines()
    lines[40] = lines[40][: len(lines[40]) // 2]  # a line cut in half, mid-file
    lines[123] = lines[123][:200]  # the last TodoWrite call itself
    lines[-1] = lines[-1][:30]  # and the last line, as a crash leaves it
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines))
    r = cli(["import", str(path)])
    assert r.code == 0
    for num in (41, 124, 132):
        assert f"{path}:{num}: " in r.err
    assert "3 malformed (lines 41, 124, 132)" in r.out
    # The lost call's result (line 127) still says the list: toolUseResult.newTodos.
    assert "7 todo calls" in r.out
    sid = store.session_by_name("claude-060f3873").id
    last = _claude_calls()[-1]
    assert _rows(store, sid, store.last_n(sid)) == [(t["content"], t["status"])
                                                    for t in last["new"]]
    assert store.events(sid)[-1].ts == normalize_ts("2025-11-21T11:54:51.180Z")


def test_strict_import_of_a_bad_file_changes_nothing(cli, tmp_path: Path,
                                                     db_path: Path) -> None:
    cli(["add", "a todo of mine"])
    before = _snapshot(db_path)
    lines = CLAUDE.read_text().splitlines()
    lines[-1] = lines[-1][:30]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines))
    r = cli(["import", "--strict", str(path)])
    assert r.code == 1
    assert r.err.startswith("error: ") and ":132:" in r.err and "nothing imported" in r.err
    assert _snapshot(db_path) == before


def test_binary_file_is_refused(cli, tmp_path: Path, db_path: Path) -> None:
    cli(["add", "x"])
    before = _snapshot(db_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"__metadata__\":{}}" + bytes(range(256)))
    r = cli(["import", str(path)])
    assert r.code == 1
    assert r.err.strip() == f"error: {path}: binary file (NUL bytes): not a transcript"
    assert _snapshot(db_path) == before


def test_no_todo_calls_is_said_not_an_error(cli, tmp_path: Path, store: Store) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(line for line in CLAUDE.read_text().splitlines()
                              if "TodoWrite" not in line and "newTodos" not in line) + "\n")
    r = cli(["import", str(path)])
    assert r.code == 0, r.err
    assert "no todo calls found; nothing imported" in r.out
    assert [s.name for s in store.sessions()] == []  # no empty session made


def test_unknown_format_is_an_error(cli, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("shopping list\n- eggs\n")
    r = cli(["import", str(path)])
    assert r.code == 1
    assert "unknown format" in r.err and "--format" in r.err


def test_missing_status_names_the_line(cli, tmp_path: Path, store: Store) -> None:
    lines = CODEX.read_text().splitlines()
    lines[5] = lines[5].replace('\\"Train the drafter\\",\\"status\\":\\"pending\\"',
                                '\\"Train the drafter\\"', 1)
    assert lines[5] != CODEX.read_text().splitlines()[5]
    path = tmp_path / "rollout.jsonl"
    path.write_text("\n".join(lines) + "\n")
    r = cli(["import", str(path)])
    assert r.code == 0
    assert f"{path}:6: update_plan: plan[1].status: missing status; skipped" in r.err
    strict = cli(["import", "--strict", str(path), "--session", "s2"])
    assert strict.code == 1 and "missing status" in strict.err
    assert store.session_by_name("s2") is None


def test_one_bad_file_does_not_undo_the_others(cli, tmp_path: Path, store: Store) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00\x01\x02")
    r = cli(["import", str(CODEX), str(bad)])
    assert r.code == 1
    assert store.session_by_name("codex-0199a3b1") is not None
    assert "binary file" in r.err


@pytest.mark.slow
def test_a_1gb_file_streams_in_bounded_memory(tmp_path: Path) -> None:
    """1 GiB of transcript (long non-todo lines and a few todo calls), imported by a fresh
    interpreter whose peak memory is checked: the file is never held whole."""
    if shutil.disk_usage(tmp_path).free < 3 << 30:
        pytest.skip("needs 3 GiB of free disk")
    lines = CLAUDE.read_text().splitlines()
    filler = json.dumps({"type": "user", "sessionId": "big", "uuid": "u",
                         "timestamp": "2025-11-21T12:00:00Z",
                         "message": {"role": "user", "content": "x" * (1 << 20)}})
    path = tmp_path / "big.jsonl"
    with path.open("w") as fh:
        fh.write("\n".join(lines[:20]) + "\n")
        block = (filler + "\n") * 64
        while fh.tell() < (1 << 30):
            fh.write(block)
        fh.write("\n".join(lines[20:]) + "\n")
    db = tmp_path / "big.db"
    script = textwrap.dedent(f"""
        import sys
        from state.store import Store
        from harness.importers import import_file
        r = import_file(Store.open({str(db)!r}), {str(path)!r})
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so it would count the
        # (large) test process this one was forked from.
        status = open("/proc/self/status").read().split("VmHWM:")[1].split()
        print(r.calls, r.imported, int(status[0]) // 1024)
    """)
    import subprocess
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert out.returncode == 0, out.stderr
    calls, imported, peak_mib = map(int, out.stdout.split())
    assert (calls, imported) == (7, 7)
    assert peak_mib < 300, f"peak memory {peak_mib} MiB for a 1 GiB file"


# -- export, import, export ---------------------------------------------------------------

def _without_ids(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        obj = json.loads(line)
        if obj["type"] == "session":
            obj.pop("name")
        elif obj["type"] == "event" and obj["kind"] == "session.created":
            obj["payload"].pop("name")
        out.append(obj)
    return out


def test_export_import_export_is_lossless(cli, store: Store, tmp_path: Path) -> None:
    assert cli(["import", str(CLAUDE)]).code == 0
    sess = "claude-060f3873"
    for args in (["add", "measure acceptance, not just shapes", "-p", "H"],
                 ["block", "t8", "--reason", "acceptance 15%"], ["note", "t8", "0.66x"],
                 ["prio", "t2", "low"], ["edit", "t3", "Analyze baseline timing ✓"]):
        assert cli(["-s", sess, *args]).code == 0
    sid = store.session_by_name(sess).id
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=8, host="gpu", stage="bench")
        tx.update_run(run.id, state="failed", exit_code=1)
        tx.record_verification(todo_id=8, run_id=run.id, passed=False, verdict="0.66x",
                               metrics={"acceptance": 0.15})
        tx.record_artifact(todo_id=8, run_id=run.id, path="bench.json", size=12)
    first = tmp_path / "a.jsonl"
    assert cli(["export", sess, "-o", str(first)]).code == 0
    # Into a fresh store, so the run ids change too.
    other = tmp_path / "other.db"
    assert cli(["--db", str(other), "import", str(first)]).code == 0
    second = cli(["--db", str(other), "export", sess])
    assert second.code == 0
    assert _without_ids(second.out) == _without_ids(first.read_text())
    assert second.out == first.read_text()  # same names and an empty store: same bytes
    # And into the same store under another name: only ids differ.
    assert cli(["import", str(first), "--session", "copy"]).code == 0
    third = cli(["export", "copy"]).out
    a, b = _without_ids(first.read_text()), _without_ids(third)
    strip = [{**o, "payload": {k: v for k, v in o.get("payload", {}).items()
                               if k not in ("run", "verification", "artifact", "run_id")}}
             if o["type"] == "event" else o for o in a]
    strip_b = [{**o, "payload": {k: v for k, v in o.get("payload", {}).items()
                                 if k not in ("run", "verification", "artifact", "run_id")}}
               if o["type"] == "event" else o for o in b]
    assert strip == strip_b
    # The copy replays like the original.
    copy_id = store.session_by_name("copy").id
    assert store.state_at(copy_id).to_json()["todos"] == store.state_at(sid).to_json()["todos"]
    # Importing the export again adds nothing.
    counts = store.session_counts()
    again = cli(["import", str(first), "--session", "copy"])
    assert again.code == 0 and "nothing new" in again.out
    assert store.session_counts() == counts


def test_export_to_an_existing_name_is_refused(cli, store: Store, tmp_path: Path) -> None:
    assert cli(["import", str(CODEX)]).code == 0
    out = tmp_path / "e.jsonl"
    assert cli(["export", "codex-0199a3b1", "-o", str(out)]).code == 0
    other = tmp_path / "o.db"
    cli(["--db", str(other), "session", "new", "codex-0199a3b1"])
    r = cli(["--db", str(other), "import", str(out)])
    assert r.code == 1 and "already exists" in r.err and "--session" in r.err


def test_import_in_a_fresh_interpreter(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    r = harness_subprocess(["--db", str(db), "import", str(OPENCODE_MD), "--json"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["todo_calls"] == 5


# -- transcripts as found ------------------------------------------------------------------

def test_claude_code_action_log(cli, store: Store) -> None:
    """A GitHub Actions log of anthropics/claude-code-action: the inputs, the action's own
    lines, then pretty-printed stream-json messages, a timestamp on every line."""
    r = cli(["import", str(ACTION_LOG)])
    assert r.code == 0, r.err
    assert "(claude-action) into session claude-d41f0c2a (new)" in r.out
    assert "3 todo calls -> 7 events" in r.out
    row = store.session_by_name("claude-d41f0c2a")
    assert row is not None
    todos = sorted(store.todos(row.id), key=lambda t: t.position)
    assert [(t.content, t.status) for t in todos] == [
        ("Reproduce the flaky test", "completed"),
        ("Find the race in the runner's log tail", "completed"),
        ("Open a PR with the fix", "completed")]
    ts = {e.ref: e.ts for e in store.events(row.id) if e.ref}
    # Each call at its line's timestamp (the messages themselves carry none).
    assert ts == {"toolu_A1": "2026-11-28T14:02:18.600000Z",
                  "toolu_A3": "2026-11-28T14:03:10.400000Z",
                  "toolu_A4": "2026-11-28T14:04:11.500000Z"}
    assert {e.actor for e in store.events(row.id) if e.kind.startswith("todo.")} == {
        "agent:claude-code"}
    assert cli(["import", str(ACTION_LOG)]).out.startswith(f"{ACTION_LOG} (claude-action): "
                                                           "already imported")


def test_action_log_copied_from_the_web_page_without_timestamps(cli, tmp_path: Path,
                                                                store: Store) -> None:
    import re

    path = tmp_path / "job.txt"
    path.write_text(re.sub(r"(?m)^\S+Z ", "", ACTION_LOG.read_text()))
    r = cli(["import", str(path)])
    assert r.code == 0, r.err
    assert "3 todo calls -> 7 events" in r.out


def test_action_log_without_full_output_says_why_nothing_was_read(cli, tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text("2026-11-28T14:02:11.0000000Z ##[group]Run anthropics/claude-code-action@v1\n"
                    "2026-11-28T14:02:13.0000000Z Running Claude Code via SDK (full output "
                    "hidden for security)...\n" + "\n".join(
                        "2026-11-28T14:02:14.0000000Z " + line for line in json.dumps(
                            {"type": "result", "subtype": "success", "num_turns": 4},
                            indent=2).splitlines()) + "\n")
    r = cli(["import", str(path)])
    assert r.code == 0, r.err
    assert "no todo calls found" in r.out
    assert "show_full_output: true" in r.out


def test_opencode_export_with_nul_bytes_in_tool_output(cli, store: Store) -> None:
    assert b"\x00" in OPENCODE_NUL.read_bytes()
    r = cli(["import", str(OPENCODE_NUL)])
    assert r.code == 0, r.err
    assert "2 todo calls -> 5 events" in r.out
    assert "2 × lines with NUL or undecodable bytes (binary tool output)" in r.out
    row = store.session_by_name("opencode-7f3a9c21e0d4")
    assert row is not None
    assert [(t.content, t.status) for t in sorted(store.todos(row.id), key=lambda t: t.position)
            ] == [("Read the safetensors header", "completed"),
                  ("Compare keys with what vLLM's eagle3 loader expects", "in_progress"),
                  ("Rename midlayer.* to layers.0.*", "pending")]


def test_jsonl_with_binary_and_non_json_lines_is_imported(cli, tmp_path: Path,
                                                          store: Store) -> None:
    lines = CLAUDE.read_bytes().splitlines()
    junk = [b"\x89PNG\r\x1a\n\x00\x00\x00\rIHDR", b"not json at all", b"\xff\xfe\xfd bytes",
            b"{\"type\": \"user\", \"message\": {\"content\": \"x\x00y\"}}"]
    mixed = lines[:40] + junk + lines[40:]
    path = tmp_path / "found.jsonl"
    path.write_bytes(b"\n".join(mixed) + b"\n")
    r = cli(["import", str(path)])
    assert r.code == 0, r.err
    assert "7 todo calls" in r.out
    # The PNG header, split by its own newline, and the two lines with NUL or bad bytes;
    # "not json at all" is malformed (a line where JSON must be).
    assert "4 × lines with NUL or undecodable bytes (binary tool output)" in r.out
    assert "1 malformed (lines 43)" in r.out
    row = store.session_by_name("claude-060f3873")
    assert row is not None and len(store.todos(row.id)) == 7


def test_a_todo_with_a_nul_skips_that_call_not_the_file(cli, tmp_path: Path,
                                                        store: Store) -> None:
    lines = CODEX.read_text().splitlines()
    i = next(n for n, x in enumerate(lines) if "update_plan" in x)
    lines[i] = lines[i].replace("Train the drafter", "Train\\\\u0000 the drafter", 1)
    path = tmp_path / "rollout.jsonl"
    path.write_text("\n".join(lines) + "\n")
    r = cli(["import", str(path)])
    assert r.code == 0, r.err
    assert f"{path}:6: update_plan: item 1 holds a NUL character; skipped" in r.err
    row = store.session_by_name("codex-0199a3b1")
    assert row is not None and all("\x00" not in t.content for t in store.todos(row.id))


def test_the_actions_execution_file_a_json_array(cli, tmp_path: Path, store: Store) -> None:
    messages = [json.loads(block) for block in _action_messages()]
    path = tmp_path / "claude-execution-output.json"
    path.write_text(json.dumps(messages, indent=2))
    r = cli(["import", str(path)])
    assert r.code == 0, r.err
    assert "(claude-stream) into session claude-d41f0c2a" in r.out
    assert "3 todo calls" in r.out


def _action_messages() -> list[str]:
    import re

    text = re.sub(r"(?m)^\S+Z ", "", ACTION_LOG.read_text())
    return [m for m in re.findall(r"(?ms)^\{\n.*?^\}$", text) if '"type"' in m]
