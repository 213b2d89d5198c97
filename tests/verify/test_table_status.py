"""A check answered from the table of known vLLM rules, not by a vLLM, is not a PASS.

Without vLLM, `harness verify` shows those checks as TABLE, its summary counts them apart
("all checks passed; 5 vLLM checks from the table: install vLLM to check them for real"),
`harness verifications`, `harness show` and the TUI show them apart, rows stored before
the status existed read the same, and a gate's ``require_vllm: true`` blocks on them.
"""

from __future__ import annotations

import json

import pytest
import yaml
from textual.widgets import Static

from harness.gates import gate_items
from pipeline.actions import Check, check_status, table_note
from pipeline.gates import parse_gate
from state.store import Store
from tests.conftest import ROOT, run_cli
from tests.tui.campaign import NOW
from tests.tui.test_served_beside_offline import _lines, _text
from tests.tui.test_snapshots import SIZE, ready
from tui.app import HarnessApp
from tui.widgets.verification import VerificationPanel

pytestmark = [pytest.mark.ml, pytest.mark.sqlite]

# The good drafter has norm_before_residual off, which every vLLM build runs: that check
# needs no vLLM (a drafter with it on makes a fifth table answer, as the main job's does).
VLLM_CHECKS = ["vllm_source", "vllm_eagle3_target", "vllm_eagle3_drafter", "vllm_weights"]
NOTE = "4 vLLM checks from the table: install vLLM to check them for real"


def test_status_of_checks_and_of_rows_stored_before_it() -> None:
    assert check_status(Check("keys", True)) == "PASS"
    assert check_status(Check("keys", False)) == "FAIL"
    assert check_status(Check("vllm_source", True, from_table=True)) == "TABLE"
    assert check_status(Check("vllm_source", False, from_table=True)) == "FAIL"
    # a stored row from before `from_table`: its message said FALLBACK, and nothing else did
    old = {"name": "vllm_eagle3_target", "passed": True, "value": "llama",
           "expected": None, "message": "FALLBACK (vLLM not importable here; ...)"}
    assert check_status(old) == "TABLE"
    assert check_status({**old, "message": "vllm 0.21.0 at /opt"}) == "PASS"
    assert check_status({**old, "passed": False}) == "FAIL"
    assert table_note([Check("a", True)]) == ""
    assert table_note([Check("a", True, from_table=True)]) == \
        "1 vLLM check from the table: install vLLM to check it for real"


def test_verify_without_vllm_never_says_pass_for_what_it_could_not_check(good, db_url):
    r = run_cli(["--db", db_url, "verify", str(good["dir"]), "--verifier",
                 str(good["verifier"])])
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    shown = {line.split()[1]: line.split()[0] for line in lines if line.startswith("  ")}
    assert all(shown[name] == "TABLE" for name in VLLM_CHECKS), shown
    assert shown["keys"] == shown["vllm_norm_flags"] == "PASS"  # checked: PASS
    assert lines[-1].startswith(f"PASSED: verify: all checks passed; {NOTE} (recorded v1")

    listed = run_cli(["--db", db_url, "verifications"])
    assert "from the table, not checked: " + ", ".join(VLLM_CHECKS) in listed.out
    with Store.open(db_url) as store:
        (v,) = store.verifications()
    assert v.metrics["vllm_checks_from_table"] == 4
    assert [c["name"] for c in v.checks if c["from_table"]] == VLLM_CHECKS


def test_a_gate_that_requires_vllm_fails_on_table_answers(good, db_url):
    r = run_cli(["--db", db_url, "verify", str(good["dir"]), "--verifier",
                 str(good["verifier"]), "--gate", "require_vllm=true", "--json"])
    assert r.code == 1, r.err
    out = json.loads(r.out)
    assert not out["passed"]
    assert "gate needs vLLM's own answers: 4 vLLM checks answered from the table, not by " \
        "vLLM, and the gate has require_vllm: install vLLM" in out["verdict"]
    bad = run_cli(["--db", db_url, "verify", str(good["dir"]), "--verifier",
                   str(good["verifier"]), "--gate", "require_vllm=1"])
    assert bad.code == 2 and "require_vllm=true or false" in bad.err
    (item,) = gate_items(parse_gate({"require_vllm": True}), {"vllm_checks_from_table": 0})
    assert item.passed and item.line == "every vLLM check was asked of an installed vLLM"
    (off,) = gate_items(parse_gate({"require_vllm": False}), {"vllm_checks_from_table": 3})
    assert off.passed


@pytest.mark.parametrize(("stage", "value", "problem"), [
    ("verify", 1, "expected true or false, got 1.0"),
    ("train", True, "require_vllm holds the vLLM compatibility checks, which eagle3.train "
                    "does not make"),
])
def test_harness_check_reads_require_vllm(tmp_path, stage, value, problem) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "eagle3-tiny.yaml").read_text())
    at = next(i for i, s in enumerate(doc["stages"]) if s["name"] == stage)
    doc["stages"][at]["gate"] = {"require_vllm": value}
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = run_cli(["check", str(spec)])
    assert r.code == 1 and r.err.count("\n") == 1, r.err
    assert f"stages[{at}] ({stage}).gate.require_vllm: {problem}" in r.err
    if stage == "verify":
        doc["stages"][at]["gate"] = {"require_vllm": True, "min_acceptance_length": 1.5}
        spec.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert run_cli(["check", str(spec)]).code == 0


@pytest.mark.anyio
async def test_the_tui_shows_table_answers_apart(good, db_path) -> None:
    """A row `harness verify` recorded without vLLM, and one stored before the status
    existed: the panel marks their vLLM checks `table`, and says how many."""
    r = run_cli(["--db", str(db_path), "add", "Verify the drafter"])
    r = run_cli(["--db", str(db_path), "verify", str(good["dir"]), "--verifier",
                 str(good["verifier"]), "--todo", "t1"])
    assert r.code == 0, r.err
    with Store.open(str(db_path)) as store:
        sid = store.session_by_name("default").id
        (v,) = store.verifications(sid)
        old = [{k: val for k, val in c.items() if k != "from_table"} for c in v.checks]
        with store.write(sid, "runner") as tx:
            tx.record_verification(todo_id=1, kind="eagle3.verify", passed=True,
                                   verdict="verify: all checks passed", checks=old,
                                   metrics={}, gate={})
    store = Store.open(str(db_path))
    try:
        app = HarnessApp(store, sid, clock=lambda: NOW)
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, "3", select=1)(pilot)
            panel = app.screen.query_one(VerificationPanel)
            for chosen in (2, 1):
                panel.choose(chosen)
                await pilot.pause()
                lines = _lines(_text(panel.query_one("#verification-report", Static).content))
                assert any(line.startswith("4 checks from the table, not checked: "
                                           "vllm_source, vllm_eagle3_target")
                           for line in lines), (chosen, lines)
                marks = {line.split()[1]: line.split()[0] for line in lines
                         if len(line.split()) > 1 and line.split()[0] in ("pass", "table",
                                                                          "FAIL")}
                assert all(marks[name] == "table" for name in VLLM_CHECKS), marks
                assert marks["keys"] == marks["vllm_norm_flags"] == "pass"
                assert "FAIL" not in marks.values()
    finally:
        store.close()
