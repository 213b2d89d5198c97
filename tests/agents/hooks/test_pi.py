"""pi through the seam: `harness hook pi install` and `uninstall` (the extension's file,
written once, removed only as written), `harness hook pi --event EVENT --payload JSON` as
the extension runs it through pi.exec (the list written and given back, a cut owing the
list, a compaction found at the next start recorded once, a person's change named, a
claim's lease renewed), and `harness import` of a session pi 0.73.1 wrote. The real pi is
in tests/agents/real/test_pi_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from state.store import Store
from tests.agents.test_leases import age
from tests.conftest import DATA, harness_subprocess

SESSION = DATA / "pi" / "session-0.73.1.jsonl"
PLAN = [{"content": "Regenerate samples", "status": "in_progress", "priority": "medium"},
        {"content": "Build the vocab mapping", "status": "pending", "priority": "medium"},
        {"content": "Train the drafter", "status": "pending"}]


def install(cwd: Path, *args: str, verb: str = "install"):  # type: ignore[no-untyped-def]
    return harness_subprocess(["hook", "pi", verb, *args], cwd=cwd,
                              env={"HOME": str(cwd / "home"),
                                   "PI_CODING_AGENT_DIR": str(cwd / "agent")})


def test_install_writes_the_extension_once_and_uninstall_removes_only_it(
        tmp_path: Path) -> None:
    ext = tmp_path / ".pi" / "extensions" / "todo-harness.ts"
    dry = install(tmp_path, "--dry-run", "--command", "/opt/h/bin/harness hook pi")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.decode().startswith(f"--- /dev/null\n+++ {ext}\n")
    assert not ext.exists()
    r = install(tmp_path, "--command", "/opt/h/bin/harness hook pi")
    assert r.returncode == 0, r.stderr
    text = ext.read_text()
    assert 'const HARNESS: string[] = ["/opt/h/bin/harness"];' in text
    assert 'name: "todowrite"' in text
    again = install(tmp_path, "--command", "/opt/h/bin/harness hook pi")
    assert b"already up to date" in again.stdout and ext.read_text() == text
    user = install(tmp_path, "--user")
    assert user.returncode == 0, user.stderr
    assert (tmp_path / "agent" / "extensions" / "todo-harness.ts").exists()
    # A neighbour is never touched; a file of that name that is not ours is never replaced.
    (ext.parent / "mine.ts").write_text("export default function () {}\n")
    other = tmp_path / "other"
    (other / ".pi" / "extensions").mkdir(parents=True)
    (other / ".pi" / "extensions" / "todo-harness.ts").write_text("// someone's\n")
    refused = install(other)
    assert refused.returncode == 1 and b"not the harness's" in refused.stderr
    assert (other / ".pi" / "extensions" / "todo-harness.ts").read_text() == "// someone's\n"
    # Uninstall: an edited file is left; the file as written goes, and nothing else.
    ext.write_text(text + "// my change\n")
    kept = install(tmp_path, verb="uninstall")
    assert kept.returncode == 1 and b"edited since" in kept.stderr and ext.exists()
    ext.write_text(text)
    gone = install(tmp_path, verb="uninstall")
    assert gone.returncode == 0 and b"removed the harness's extension" in gone.stdout
    assert not ext.exists() and (ext.parent / "mine.ts").exists()
    nothing = install(tmp_path, verb="uninstall")
    assert nothing.returncode == 0 and b"nothing of the harness's here" in nothing.stdout


def pi(cli, event: str, **payload: Any):  # type: ignore[no-untyped-def]
    body = {"cwd": "/work/eagle3", "session_id": "01a24e22", **payload}
    r = cli(["hook", "pi", "--event", event, "--payload", json.dumps(body)])
    assert r.code == 0, r.err
    return r


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HARNESS_SESSION", "eagle3")
    return "eagle3"


def cuts(db_path: Path, name: str) -> list[str]:
    with Store.open(str(db_path)) as s:
        row = s.session_by_name(name)
        assert row is not None
        return [e.payload["cut"] for e in s.events(row.id) if e.kind == "agent.context"]


def test_the_extensions_calls(cli, db_path: Path, session: str) -> None:
    assert pi(cli, "session_start", reason="startup", entries=0, compaction=None).out == ""
    wrote = pi(cli, "todowrite", todos=PLAN, tool_call_id="call_2").out
    assert "[>] t1 Regenerate samples (medium)" in wrote
    assert "[ ] t3 Train the drafter (medium)" in wrote
    # The start owed the list, and the write showed it: nothing more to say.
    assert pi(cli, "before_agent_start").out == ""
    # A person's change, named as the model knows the item, once.
    assert cli(["prio", "t3", "high"]).code == 0
    told = pi(cli, "tool_result", tool_name="bash").out
    assert "item 3 \"Train the drafter\" (t3): priority 'medium' -> 'high' by human" in told
    assert pi(cli, "tool_result", tool_name="bash").out == ""
    # The model resends its old priority: the person's stays.
    resent = pi(cli, "todowrite", tool_call_id="call_6",
                todos=[{**PLAN[0], "status": "completed"}, PLAN[1], PLAN[2]]).out
    assert "[ ] t3 Train the drafter (high)" in resent
    # `pi -c` after a compaction that pi -p never announced: each cut once; the list
    # beside the next prompt.
    start = {"reason": "startup", "entries": 6, "compaction": "5ddce2be"}
    pi(cli, "session_start", **start)
    pi(cli, "session_start", **start)
    assert cuts(db_path, session) == ["startup", "compact", "resume"]
    back = pi(cli, "before_agent_start").out
    assert back.startswith("Todo list (session eagle3): 1/3 completed. Kept by todo-harness "
                           "across compactions and restarts")
    assert "[ ] t3 Train the drafter (high)" in back
    assert pi(cli, "before_agent_start").out == ""
    pi(cli, "session_compact", compaction="7f00aa11")
    assert cuts(db_path, session)[-1] == "compact"
    assert "Kept by todo-harness across compactions" in pi(cli, "tool_result",
                                                           tool_name="read").out
    # A write the harness refuses reaches the model as the tool's error (stderr, nothing
    # on stdout): the extension throws it.
    bad = cli(["hook", "pi", "--event", "todowrite", "--payload",
               json.dumps({"todos": [{"content": "x", "status": "done"}]})])
    assert bad.code == 0 and bad.out == "" and "status" in bad.err


def test_each_call_renews_the_agents_lease(cli, db_path: Path, session: str) -> None:
    pi(cli, "todowrite", todos=PLAN)
    assert cli(["next", "--claim", "--actor", "pi", "--lease", "10m"]).code == 0
    assert pi(cli, "tool_result", tool_name="bash").out == ""  # nothing new: no write
    with Store.open(str(db_path)) as store:
        sid = store.session_by_name(session).id  # type: ignore[union-attr]
        age(store, 120)
        aged = store.leases(sid)[1][2].heartbeat_at
        pi(cli, "tool_result", tool_name="bash")
        assert store.leases(sid)[1][2].heartbeat_at > aged


def test_import_reads_a_pi_session_to_the_list_it_wrote(cli, db_path: Path,
                                                       session: str) -> None:
    r = cli(["import", str(SESSION), "--session", "pi-import", "--json"])
    assert r.code == 0, r.err
    (report,) = json.loads(r.out)
    assert (report["format"], report["todo_calls"], report["imported"]) == ("pi-session", 3, 3)
    listed = json.loads(cli(["list", "--json", "--session", "pi-import"]).out)
    assert [(t["content"], t["status"], t["priority"])
            for t in sorted(listed, key=lambda t: t["id"])] == [
        ("Regenerate samples", "completed", "medium"),
        ("Build the vocab mapping", "completed", "medium"),
        ("Train the drafter", "in_progress", "high")]
    again = json.loads(cli(["import", str(SESSION), "--session", "pi-import",
                            "--json"]).out)[0]
    assert (again["imported"], again["already_imported"]) == (0, 3)
