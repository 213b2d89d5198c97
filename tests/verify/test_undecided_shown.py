"""An undecided served gate keeps its own name wherever a verification is shown: the TUI's
badge and gate lines, `harness verifications` and `show`, the report, and the MCP tool's
text. A failed one stays FAILED beside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.gates import outcome
from state.store import Store
from tests.conftest import ROOT

pytestmark = [pytest.mark.sqlite]

GATE = {"min_served_speedup": [{"at": 1, "min": 1.3}, {"at": 64, "min": 1.0}]}
UNDECIDED = {"speedup_c1": 1.498, "speedup_low_c1": 1.205, "speedup_high_c1": 1.862,
             "speedup_ci_c1": 0.243, "speedup_trials_c1": 6, "stopped_c1": "budget",
             "speedup_c64": 1.347, "speedup_low_c64": 1.253, "speedup_high_c64": 1.449,
             "speedup_trials_c64": 8, "confidence": 0.95, "level_budget": 40.0}
FAILED = {**UNDECIDED, "speedup_c64": 0.9, "speedup_low_c64": 0.85, "speedup_high_c64": 0.95}


def _store(path: Path) -> None:
    store = Store.open(str(path))
    sid = store.create_session("s", actor="human")
    with store.write(sid, "runner") as tx:
        t = tx.create_todo("Benchmark the schedule", stage="benchmark", origin="pipeline")
        for metrics, passed in ((UNDECIDED, False), (FAILED, False)):
            tx.record_verification(todo_id=t.num, run_id=None, kind="eagle3.benchmark",
                                   passed=passed, verdict="gate ...", checks=[
                                       {"name": "requests_ok", "passed": True}],
                                   gate=GATE, metrics=metrics)
    store.close()


def _harness(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "--db", str(db), "--session",
                           "s", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                            "HOME": str(db.parent)})


def test_undecided_is_neither_passed_nor_failed(tmp_path: Path) -> None:
    assert outcome(False, [], GATE, UNDECIDED) == "undecided"
    assert outcome(False, [], GATE, FAILED) == "failed"
    assert outcome(False, [{"name": "x", "passed": False}], GATE, UNDECIDED) == "failed"
    assert outcome(True, [], GATE, UNDECIDED) == "passed"
    db = tmp_path / "s.db"
    _store(db)
    listed = _harness(db, "verifications")
    assert listed.returncode == 0, listed.stderr
    heads = [ln.split()[1] for ln in listed.stdout.splitlines() if ln.strip().startswith("v")]
    assert heads == ["UNDECIDED", "FAIL"]
    rows = json.loads(_harness(db, "verifications", "--json").stdout)
    rows = rows if isinstance(rows, list) else rows["verifications"]
    assert [r["outcome"] for r in rows] == ["undecided", "failed"]
    shown = _harness(db, "show", "t1").stdout
    assert "v1 undecided" in shown and "v2 failed" in shown
    page = tmp_path / "r.html"
    assert _harness(db, "report", "--html", str(page)).returncode == 0
    html = page.read_text()
    assert '<span class="undecided">UNDECIDED</span>' in html
    assert '<span class="fail">FAILED</span>' in html
    assert "served_speedup c=1 undecided: 1.498x, 95% interval 1.205-1.862x" in html


def test_the_tui_badge_and_gate_lines_say_undecided(tmp_path: Path) -> None:
    from rich.console import Console

    from tui.widgets.verification import gate_rows, verdict_badge

    db = tmp_path / "s.db"
    _store(db)
    store = Store.open(str(db))
    try:
        undecided, failed = store.verifications(store.session_by_name("s").id)
    finally:
        store.close()
    assert verdict_badge(undecided).plain == " UNDECIDED "
    assert verdict_badge(failed).plain == " FAILED "
    from harness.gates import Gate

    lines = [value.plain for _key, value in gate_rows(Gate.from_json(GATE), UNDECIDED)]
    assert lines[0].startswith("? served_speedup c=1 undecided:")
    assert lines[1].startswith("✓ ")
    Console(record=True).print(verdict_badge(undecided))  # renders as rich text
