"""After a failure: what a rerun does, what --dry-run says it would do, and how to retry."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runner.test_runner import write_spec


def spec_with_a_failing_stage(tmp_path: Path) -> Path:
    return write_spec(tmp_path / "p.yaml", [
        {"name": "prepare", "run": "echo ready"},
        {"name": "train", "needs": ["prepare"], "run": "test -e fixed && echo trained"},
        {"name": "export", "needs": ["train"], "run": "echo exported"}])


def verdicts(out: str) -> dict[str, str]:
    """stage -> verdict, from the dry run's rows (the command under each is indented more)."""
    rows = [ln.split() for ln in out.splitlines()
            if ln.startswith("  ") and not ln.startswith("      ")]
    return {row[1]: row[0] for row in rows}


def statuses(cli) -> dict[str, str]:
    return {t["stage"]: t["status"] for t in json.loads(cli(["list", "--json"]).out)}


def test_the_summary_names_the_retry_and_retry_blocked_runs_it(tmp_path: Path, cli) -> None:
    spec = spec_with_a_failing_stage(tmp_path)
    first = cli(["run", str(spec), "-q"])
    assert first.code == 1
    assert f"harness run {spec} --retry-blocked" in first.out
    (tmp_path / "work" / "fixed").write_text("")
    again = cli(["run", str(spec), "-q"])  # a plain rerun leaves blocked stages alone
    assert again.code == 1 and "--retry-blocked" in again.out
    assert "  skipped, completed by an earlier run: prepare\n" in again.out
    assert statuses(cli) == {"prepare": "completed", "train": "blocked", "export": "pending"}
    retry = cli(["run", str(spec), "-q", "--retry-blocked"])
    assert retry.code == 0, retry.out
    assert "t2 was blocked: running it again" in retry.out
    assert "  skipped, completed by an earlier run: prepare\n" in retry.out
    resumed = cli(["run", str(spec), "-q"])
    assert resumed.code == 0 and "done: 3/3 completed\n  skipped, completed by an earlier " \
        "run: prepare, train, export (nothing left to run)\n" in resumed.out, resumed.out
    assert statuses(cli) == {"prepare": "completed", "train": "completed",
                             "export": "completed"}
    notes = json.loads(cli(["show", "t2", "--json"]).out)["notes"]
    assert any(n["text"].startswith("unblocked by --retry-blocked (was: r2 failed")
               for n in notes)


def test_dry_run_says_what_a_real_run_would_do_now(tmp_path: Path, cli, backend: str) -> None:
    spec = spec_with_a_failing_stage(tmp_path)
    fresh = cli(["run", str(spec), "--dry-run"])
    assert fresh.code == 0, fresh.err
    assert "would run 3 of 3 stage(s)" in fresh.out
    if backend == "sqlite":  # a dry run creates no store
        assert not list(tmp_path.rglob("*.db"))
    cli(["run", str(spec), "-q"])
    dry = cli(["run", str(spec), "--dry-run"])
    assert "would run 0 of 3 stage(s)" in dry.out
    assert verdicts(dry.out) == {"prepare": "skip", "train": "blocked", "export": "waiting"}
    assert "--retry-blocked` runs them" in dry.out
    retry = cli(["run", str(spec), "--dry-run", "--retry-blocked"])
    assert verdicts(retry.out) == {"prepare": "skip", "train": "run", "export": "run"}
    assert statuses(cli)["train"] == "blocked"  # dry runs changed nothing
    cli(["cancel", "t3"])
    only = cli(["run", str(spec), "--dry-run", "--only", "export"])
    assert "cancelled" in only.out and "would run 0 of 1" in only.out


def test_a_run_in_a_session_that_never_ran_the_pipeline_says_where_it_ran(
        tmp_path: Path, cli) -> None:
    """After the README's tour its session is the current one: running the main job then
    runs every stage again there. The run says so first, and how to resume instead."""
    spec = spec_with_a_failing_stage(tmp_path)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "fixed").write_text("")
    assert cli(["run", str(spec), "-q"]).code == 0
    assert cli(["session", "new", "tour"]).code == 0
    again = cli(["run", str(spec), "-q"])
    assert again.err.startswith("warning: pipeline test ran in session default, not in 'tour' "
                                "(harness session use): every stage runs again here, over "
                                "the same files; to resume it there: --session default\n")
    resumed = cli(["run", str(spec), "-q"])  # now it has run here too: no warning
    assert "warning" not in resumed.err and "skipped, completed by an earlier run" in resumed.out
