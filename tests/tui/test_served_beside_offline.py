"""Offline and served figures of one drafter side by side: the TUI's verification panel
(through its pilot, and a snapshot) and `harness show` (through the CLI).

The figures are those of the H200 run issue 22 reports: the verify stage's reference loop
(τ 3.104, a 2.17x bound, 2.34x projected) and vLLM serving the same drafter (τ 3.111,
1.42x at one request, 0.97x at 32). The rows are recorded as the runner records them: the
benchmark's carries the verify row it was compared with (``offline_verification``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import Static

from harness.runner.offline import offline_figures
from state.store import Store
from tests.conftest import run_cli
from tests.tui.campaign import NOW, at
from tests.tui.test_snapshots import SIZE, ready
from tui.app import HarnessApp
from tui.widgets.verification import VerificationPanel

pytestmark = pytest.mark.sqlite

VERIFY = {"tau": 3.104, "acceptance_length": 3.104, "k": 3,
          "acceptance_per_position": [0.806, 0.689, 0.609],
          "reference_speedup_bound": 2.17, "projected_speedup": 2.34,
          "metric_notes": {"reference_speedup_bound": "wall clock of the reference loop over "
                                                      "plain decoding: an upper bound no "
                                                      "engine reaches; not served"}}
SERVED = {"speedup_c1": 1.42, "speedup_c32": 0.97, "speedup": 1.42, "speedup_min": 0.97,
          "acceptance_length": 3.111, "acceptance_per_position": [0.808, 0.691, 0.613],
          "acceptance_length_c1": 3.12, "acceptance_length_c32": 3.1}
SERVED_GATE = {"min_served_speedup": [{"at": 1, "min": 1.3}, {"at": 32, "min": 1.0}],
               "max_served_tau_gap": 0.1}


def record(store: Store) -> tuple[int, int, int]:
    """A verify todo and a benchmark todo with their rows; (session, verify, benchmark)."""
    sid = store.create_session("h200", actor="human", pipeline="eagle3-h200", ts=at(0))
    with store.write(sid, "runner") as tx:
        v = tx.create_todo("Verify the drafter on the GPU", stage="verify", ts=at(1))
        b = tx.create_todo("Benchmark the drafter served by vLLM", stage="benchmark",
                           depends_on=[v.num], ts=at(1))
        tx.update_todo(v.num, status="completed", ts=at(10))
        row = tx.record_verification(
            todo_id=v.num, ts=at(10), kind="eagle3.verify", passed=True,
            verdict="acceptance 70% (τ 3.10) at k=3; pos1 81%; reference-loop bound 2.17x, "
                    "projected 2.34x (not served: eagle3.benchmark measures the engine); "
                    "gate passed: acceptance_length 3.104 meets >= 3",
            artifact="runs/eagle3-h200/drafter", checks=[], metrics=VERIFY,
            gate={"min_acceptance_length": 3.0})
        served = {**SERVED, **offline_figures(row), "offline_stage": "verify",
                  "offline_source": f"verify v{row.id}", "served_tau_gap": 0.0023}
        tx.record_verification(
            todo_id=b.num, ts=at(30), kind="eagle3.benchmark", passed=False,
            verdict="gate failed: c=1: 1.42x; c=32: 0.97x; gate needs served_speedup c=32 ≥ 1 "
                    "(measured 0.97)", checks=[], metrics=served, gate=SERVED_GATE)
        tx.update_todo(b.num, status="blocked", blocked_reason="r2 failed: gate failed: c=1: "
                       "1.42x; c=32: 0.97x; gate needs served_speedup c=32 ≥ 1 (measured 0.97)",
                       ts=at(30))
    return sid, v.num, b.num


@pytest.fixture
def h200(db_path: Path) -> Any:
    store = Store.open(str(db_path))
    sid, v, b = record(store)
    yield store, sid, v, b
    store.close()


def _text(renderable: Any, width: int = 120) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def _lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


@pytest.mark.anyio
async def test_the_verify_todos_panel_puts_the_served_figures_beside_its_own(h200) -> None:
    store, sid, v, b = h200
    app = HarnessApp(store, sid, clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, "3", select=v)(pilot)
        panel = app.screen.query_one(VerificationPanel)
        lines = _lines(_text(panel.query_one("#verification-report", Static).content))
        assert any(line.endswith("speed (reference loop, not served) ≤2.17x bound, 2.34x "
                                 "projected") for line in lines), lines
        assert "Offline (eagle3.verify v1) beside served (eagle3.benchmark v2)" in lines
        assert "offline (ref. loop) served (vLLM)" in lines
        assert "τ 3.104 3.111 (0.2% apart)" in lines
        assert "per position 0.806/0.689/0.609 0.808/0.691/0.613" in lines
        assert "speedup c=1 ≤2.17x bound, 2.34x projected 1.42x (τ 3.12)" in lines
        assert "speedup c=32 0.97x (τ 3.10)" in lines

        # the benchmark's own panel: the same table, and its gate on the engine's figures
        await ready(app, select=b)(pilot)
        report = _text(panel.query_one("#verification-report", Static).content)
        lines = _lines(report)
        assert "Offline (eagle3.verify v1) beside served (eagle3.benchmark v2)" in lines
        # (the panel is narrow here: one line per threshold, named by its metric)
        assert "✓ served_speedup c=1 1.42, needs ≥ 1.3" in lines
        assert "✗ served_speedup c=32 0.97, needs ≥ 1" in lines
        assert "✓ served_tau_gap served τ 3.11 vs offline τ 3.10 of verify v1: 0.2% apart " \
            "(tolerance 10%)" in " ".join(lines), lines


def test_snapshot_of_offline_beside_served(snap_compare: Any, h200) -> None:
    store, sid, v, _b = h200
    app = HarnessApp(store, sid, clock=lambda: NOW)
    assert snap_compare(app, terminal_size=SIZE, run_before=ready(app, "3", select=v))


def test_harness_show_puts_offline_and_served_side_by_side(h200, db_path: Path) -> None:
    _store, _sid, v, b = h200
    for num in (v, b):
        r = run_cli(["--db", str(db_path), "--session", "h200", "show", f"t{num}"])
        assert r.code == 0, r.err
        lines = _lines(r.out)
        at_ = lines.index("offline (eagle3.verify v1) beside served (eagle3.benchmark v2):")
        assert lines[at_ + 1] == "offline (reference loop) served (engine)"
        assert lines[at_ + 2] == "τ 3.104 3.111 (0.2% apart)"
        assert lines[at_ + 3] == "per position 0.806/0.689/0.609 0.808/0.691/0.613"
        assert lines[at_ + 4] == "speedup c=1 ≤2.17x bound, 2.34x projected 1.42x (τ 3.12)"
        assert lines[at_ + 5] == "speedup c=32 0.97x (τ 3.10)"
    data = json.loads(run_cli(["--db", str(db_path), "--session", "h200", "show", f"t{v}",
                               "--json"]).out)
    (pair,) = data["offline_and_served"]
    assert pair["offline"] == "v1" and pair["served"] == "v2"
    assert pair["rows"][0] == {"figure": "τ", "offline": "3.104",
                               "served": "3.111 (0.2% apart)"}
    # a todo without a served benchmark shows no such table
    store2 = Store.open(str(db_path))
    sid2 = store2.create_session("alone", actor="human")
    with store2.write(sid2, "runner") as tx:
        t = tx.create_todo("Verify", stage="verify")
        tx.record_verification(todo_id=t.num, kind="eagle3.verify", passed=True, verdict="ok",
                               checks=[], metrics=VERIFY, gate={})
    store2.close()
    out = run_cli(["--db", str(db_path), "--session", "alone", "show", f"t{t.num}"]).out
    assert "beside served" not in out
