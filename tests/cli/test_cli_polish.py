"""Smaller things a newcomer meets: aligned listings, usage exit codes, the docs script."""

from __future__ import annotations

import json
import subprocess
import sys

from state.store import Store
from tests.conftest import ROOT

LONG_ACTOR = "agent:claude-code:3f9a0c2e-5b1d-4e8f-a7c6-0123456789ab"


def test_log_columns_line_up_with_long_actors(cli, db_url: str) -> None:
    cli(["add", "short"])
    with Store.open(db_url) as store:
        sid = store.session_by_name("default").id
        with store.write(sid, LONG_ACTOR) as tx:
            tx.update_todo(1, status="in_progress")
        with store.write(sid, "human") as tx:
            tx.update_todo(1, priority="high")
    lines = [ln for ln in cli(["log"]).out.splitlines() if " t1 " in ln]
    assert len(lines) == 3
    starts = {line.index("t1 ") for line in lines}  # the todo column, after the actor
    assert len(starts) == 1, lines
    assert any("agent:claude-code:3f9a0c2e-5b1d-4e8f-a7…" in line for line in lines)
    shown = cli(["show", "t1"]).out.split("history:\n")[1].splitlines()
    assert len({line.index("created") if "created" in line else line.index("status")
                if "status" in line else line.index("priority") for line in shown}) == 1


def test_start_of_a_malformed_id_is_a_usage_error(cli) -> None:
    before = cli(["log", "--json"]).out
    r = cli(["start", "nope"])
    assert r.code == 2 and r.err.startswith("error: not a todo id: 'nope'")
    assert cli(["show", "nope"]).code == 2
    assert cli(["start", "t99"]).code == 1  # well formed but unknown: an error to act on
    assert json.loads(cli(["log", "--json"]).out) == json.loads(before)


def test_gen_cli_docs_help_changes_nothing(tmp_path) -> None:
    before = (ROOT / "docs" / "cli.md").read_bytes()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--check" in r.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "-x"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert (ROOT / "docs" / "cli.md").read_bytes() == before


def test_docs_cli_md_is_current() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_no_doc_cites_a_file_outside_the_repository() -> None:
    """The brief is not in the repository: docs and code cite the project's own files."""
    needle = "BRIEF" + " section"  # split, or this file would cite it
    cited = []
    for path in [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"),
                 *ROOT.glob("harness/**/*.py"), *ROOT.glob("pipeline/**/*.py"),
                 *ROOT.glob("state/**/*.py"), *ROOT.glob("tui/**/*.py"),
                 *ROOT.glob("tests/*.py")]:
        if needle in path.read_text(errors="replace"):
            cited.append(str(path.relative_to(ROOT)))
    assert cited == []


def test_the_tour_ends_back_in_default_on_a_fresh_store(cli) -> None:
    """The README tour starts with `session new tour` and ends with `session use
    default`, which works before the main job has made that session."""
    assert cli(["session", "new", "tour"]).code == 0
    cli(["add", "a tour todo"])
    r = cli(["session", "use", "default"])
    assert r.code == 0 and r.out.strip() == "now using session default"
    assert "no todos" in cli(["list"]).out
    missing = cli(["session", "use", "nope"])
    assert missing.code == 1 and "no session named 'nope'" in missing.err
