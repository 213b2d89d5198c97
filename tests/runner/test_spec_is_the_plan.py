"""The spec is the plan: a run follows the spec's needs as they are now, refuses a
completed stage whose action or ``with:`` changed unless told what to do with it, and
starts no server for a stage that will not run; a measurement that needs servers runs
after a blocked gate; a long line is cut only on the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import HarnessError
from state.store import Store
from tests.runner.test_runner import by_stage, make_runner, write_spec


def test_a_dependency_the_spec_dropped_no_longer_holds_a_stage_back(tmp_path: Path,
                                                                     store: Store) -> None:
    """2026-12-06: `reference` needed `benchmark`, which blocked; the spec was edited so
    that it needs only the servers, and the next run still said "waiting on t21"."""
    stages = [{"name": "serve", "run": "echo up"},
              {"name": "bench", "needs": ["serve"], "run": "echo gate; exit 1"},
              {"name": "reference", "needs": ["bench", "serve"], "run": "echo measured"}]
    spec = write_spec(tmp_path / "p.yaml", stages)
    runner = make_runner(store, spec)
    runner.run()
    t = by_stage(store, runner.sid)
    assert t["bench"].status == "blocked" and t["reference"].status == "pending"
    assert t["reference"].depends_on == [t["bench"].num, t["serve"].num]
    # a person's own dependency is theirs to keep
    with store.write(runner.sid, "human") as tx:
        mine = tx.create_todo("Review the plan", status="completed")
        tx.update_todo(t["reference"].num,
                       depends_on=[t["bench"].num, t["serve"].num, mine.num])
    stages[2]["needs"] = ["serve"]
    write_spec(tmp_path / "p.yaml", stages)
    again = make_runner(store, spec)
    report = again.run()
    t = by_stage(store, runner.sid)
    assert t["reference"].status == "completed", again.lines
    assert t["reference"].depends_on == [t["serve"].num, mine.num]
    said = next(line for line in again.lines if line.startswith("[reference]"))
    assert said == (f"[reference] {t['reference'].id} needs follow the spec (serve): no longer "
                    f"waits on {t['bench'].id}")
    assert "reference" in report.completed and t["bench"].status == "blocked"
    # the todo's history keeps it
    notes = [e.payload.get("text", "") for e in store.events(runner.sid,
                                                             todo_id=t["reference"].num)
             if e.kind == "todo.noted"]
    assert any(n.startswith("needs follow the spec (serve)") for n in notes), notes
    # a dependency the spec adds holds the stage back as well
    stages.append({"name": "late", "run": "echo late"})
    stages[0]["needs"] = ["late"]
    write_spec(tmp_path / "p.yaml", stages)
    make_runner(store, spec).run()
    t = by_stage(store, runner.sid)
    assert t["serve"].depends_on == [t["late"].num]


def test_a_completed_stage_whose_definition_changed_is_refused_then_rerun_or_kept(
        tmp_path: Path, store: Store) -> None:
    stages = [{"name": "make", "run": "echo v1 > out.txt", "outputs": ["out.txt"]},
              {"name": "use", "needs": ["make"], "run": "cat out.txt"}]
    spec = write_spec(tmp_path / "p.yaml", stages)
    first = make_runner(store, spec)
    first.run()
    runs = len(store.runs(first.sid))
    stages[0]["run"] = "echo v2 > out.txt"
    write_spec(tmp_path / "p.yaml", stages)
    refused = make_runner(store, spec)
    with pytest.raises(HarnessError) as err:
        refused.run()
    assert "the spec changed 1 completed stage(s) since they ran: make (run: changed)" in \
        str(err.value)
    assert "--rerun-changed" in str(err.value) and "--keep-changed" in str(err.value)
    assert len(store.runs(first.sid)) == runs  # refused before anything ran
    kept = make_runner(store, spec, changed="keep")
    kept.run()
    assert len(store.runs(first.sid)) == runs
    assert any("kept r1's result though the spec changed: run: changed" in line
               for line in kept.lines)
    make_runner(store, spec).run()  # kept: not asked again
    stages[0]["run"] = "echo v3 > out.txt"
    write_spec(tmp_path / "p.yaml", stages)
    again = make_runner(store, spec, changed="rerun")
    again.run()
    text, _ = store.log([r for r in store.runs(first.sid) if r.stage == "use"][-1].id)
    assert text == "v3\n"  # the stage after it ran again too
    assert [r.stage for r in store.runs(first.sid)][runs:] == ["make", "use"]


def test_the_dry_run_plans_with_the_specs_needs_and_names_changed_stages(
        tmp_path: Path, cli) -> None:
    stages = [{"name": "a", "run": "exit 3"}, {"name": "b", "run": "echo b"},
              {"name": "c", "needs": ["a", "b"], "run": "echo c"}]
    spec = write_spec(tmp_path / "p.yaml", stages)
    assert cli(["run", str(spec), "--quiet"]).code != 0
    stages[2]["needs"] = ["b"]
    stages[1]["run"] = "echo bb"
    write_spec(tmp_path / "p.yaml", stages)
    dry = cli(["run", str(spec), "--dry-run"])
    assert dry.code == 0, dry.err
    line = next(ln for ln in dry.out.splitlines() if ln.strip().startswith("run ") and " c " in ln)
    assert "t3" in line
    assert "the spec changed completed stages since they ran: b (run: changed)" in dry.out
    r = cli(["run", str(spec), "--quiet"])
    assert r.code == 1 and "b (run: changed)" in r.err and "Traceback" not in r.err


def test_no_server_is_started_for_a_stage_held_back_by_a_blocked_one(
        tmp_path: Path, store: Store) -> None:
    """A stopped server is started again only for a stage that will run: `after` waits on
    the blocked `gate` as well, so its server stays stopped."""
    from harness.services import stop_services

    service = {"url": "http://127.0.0.1:9", "pid": 999999, "pgid": 999999, "port": 9}
    stages = [{"name": "serve", "run": "echo '" + json.dumps(
                  {"action": "x", "metrics": {"service": service}}) + "' > /dev/null"},
              {"name": "gate", "needs": ["serve"], "run": "exit 1"},
              {"name": "after", "needs": ["serve", "gate"], "run": "echo after"}]
    spec = write_spec(tmp_path / "p.yaml", stages)
    runner = make_runner(store, spec)
    runner.run()
    sid = runner.sid
    serve_run = next(r for r in store.runs(sid) if r.stage == "serve")
    with store.write(sid, "runner") as tx:  # as a serve action's result records its server
        tx.update_run(serve_run.id, result={"metrics": {"service": service}},
                      job={**(serve_run.job or {}), "service": {"state": "stopped"}})
    stop_services(store, sid, out=lambda _l: None)
    again = make_runner(store, spec)
    again.run()
    assert not any("starting it again" in line for line in again.lines), again.lines
    assert by_stage(store, sid)["serve"].status == "completed"


def test_a_long_line_is_cut_only_on_the_terminal_and_says_where_it_is_whole(
        tmp_path: Path, store: Store, cli) -> None:
    command = "starting: python3 -m vllm.entrypoints.cli.main serve " + "x" * 400
    spec = write_spec(tmp_path / "p.yaml", [{"name": "serve", "run": f"echo '{command}'"}])
    runner = make_runner(store, spec)
    runner.run()
    shown = next(line for line in runner.lines if "starting:" in line)
    assert shown.endswith("… (cut here; the whole line: harness logs r1)")
    text, _ = store.log(1)
    assert text == command + "\n"
