"""A stage is run as the one todo bound to it: a second binding is refused, or moved."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli_todos import _assert_one_line_error, events
from tests.runner.test_runner import write_spec


def todos(cli) -> dict[str, dict]:
    return {t["id"]: t for t in json.loads(cli(["list", "--json"]).out)}


def test_a_held_stage_is_refused_on_add_and_edit(cli) -> None:
    assert cli(["add", "Train the drafter", "--stage", "train"]).code == 0
    cli(["add", "Something else"])
    before = events(cli)
    _assert_one_line_error(cli(["add", "Train again", "--stage", "train"]), 2,
                           "stage 'train' is bound to t1", "--move-stage")
    _assert_one_line_error(cli(["edit", "t2", "--stage", "train"]), 2,
                           "stage 'train' is bound to t1")
    _assert_one_line_error(cli(["edit", "t2", "new text", "--stage", "train"]), 2,
                           "bound to t1")
    _assert_one_line_error(cli(["add", "x", "--move-stage"]), 2, "needs --stage")
    _assert_one_line_error(cli(["edit", "t2"]), 2, "say what to change")
    _assert_one_line_error(cli(["edit", "t2", "--stage", "a", "--no-stage"]), 2, "not both")
    assert events(cli) == before  # nothing half done: not even the text of t2
    assert todos(cli)["t2"]["content"] == "Something else"


def test_move_stage_moves_the_binding_and_says_so(cli) -> None:
    cli(["add", "Train the drafter", "--stage", "train"])
    r = cli(["add", "Train it my way", "--stage", "train", "--move-stage"])
    assert r.code == 0, r.err
    listing = todos(cli)
    assert listing["t1"]["stage"] is None and listing["t2"]["stage"] == "train"
    shown = json.loads(cli(["show", "t1", "--json"]).out)
    assert [n["text"] for n in shown["notes"]] == ["stage train moved to t2"]
    assert cli(["edit", "t1", "--stage", "train", "--move-stage"]).code == 0
    assert todos(cli)["t1"]["stage"] == "train" and todos(cli)["t2"]["stage"] is None
    assert cli(["edit", "t1", "--no-stage"]).out.strip() == "edited t1"
    assert todos(cli)["t1"]["stage"] is None
    assert cli(["edit", "t1", "--no-stage"]).out.strip() == "t1 unchanged"
    assert cli(["edit", "t2", "--stage", "train"]).code == 0  # free again: no flag needed


def test_the_tour_after_a_pipeline_run_cannot_take_its_stage(tmp_path: Path, cli) -> None:
    """The issue's newcomer: the README tour typed after the main job moved the pipeline's
    `train` binding to a new todo, and the next run failed."""
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "prepare", "run": "echo ready"},
        {"name": "train", "needs": ["prepare"], "run": "echo trained"}])
    assert cli(["run", str(spec), "-q"]).code == 0
    before = events(cli)
    _assert_one_line_error(cli(["add", "Train the drafter", "--depends", "t1", "--stage",
                                "train"]), 2, "stage 'train' is bound to t2 (completed)",
                           "harness session new")
    assert events(cli) == before
    # ...in a session of its own, the tour binds what it likes
    assert cli(["session", "new", "tour"]).code == 0
    assert cli(["add", "Fix reasoning reassembly"]).code == 0
    assert cli(["add", "Train the drafter", "--depends", "t1", "--stage", "train"]).code == 0
    assert cli(["--session", "default", "run", str(spec), "-q"]).code == 0
