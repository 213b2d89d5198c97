"""`harness metrics` and `harness plot` on the series a person's own script recorded (a
shell `run:` stage, no EAGLE-3 code), run through the real runner; `--compare` against
another session's run; the errors they give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from state.store import Store
from tests.runner.test_runner import make_runner, write_spec

SCRIPT = r"""
for i in 1 2 3 4 5 6; do
  echo "step $i"
  echo "@series {\"metric\": \"loss\", \"x\": $((i * 100)), \"y\": $((60 - i * ${DROP:-5}))}"
done
for e in 1 2; do for p in 1 2; do
  echo "@series {\"metric\": \"accuracy\", \"axis\": \"epoch\", \"x\": $e, \"y\": 0.$((4 + e + p)), \"labels\": {\"position\": $p}}"
done; done
echo '@series {"metric": "tau", "axis": "checkpoint", "x": "untrained", "y": 1.1}'
echo '@series {"metric": "tau", "axis": "checkpoint", "x": "mine", "y": 2.9}'
"""


@pytest.fixture
def recorded(tmp_path: Path, store: Store) -> Store:
    script = tmp_path / "mine.sh"
    script.write_text(SCRIPT)
    for session, drop in (("lastweek", "3"), ("s", "5")):
        spec = write_spec(tmp_path / f"{session}.yaml", [
            {"name": "mine", "run": f"sh {script}", "env": {"DROP": drop}},
            {"name": "quiet", "run": "echo nothing to plot"}])
        runner = make_runner(store, spec, session=session)
        assert runner.run().ok, runner.lines
    return store


def test_metrics_lists_what_the_script_recorded(recorded: Store, cli) -> None:
    r = cli(["--session", "s", "metrics"])
    assert r.code == 0, r.err
    assert r.out.splitlines()[1].split() == ["t1", "mine", "r3", "succeeded", "loss,",
                                             "accuracy,", "tau"]
    r = cli(["--session", "s", "metrics", "mine"])
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == "t1 mine r3 (succeeded, session s): 4 series, 12 points"
    assert lines[2].split() == ["loss", "-", "step", "6", "100", "600", "30", "30", "55"]
    assert lines[3].split()[:4] == ["accuracy", "position", "1", "epoch"]
    assert lines[5].split()[:6] == ["tau", "-", "checkpoint", "2", "untrained", "mine"]
    data = json.loads(cli(["--session", "s", "metrics", "t1", "--json"]).out)
    assert (data["todo"], data["run"], data["stage"]) == ("t1", "r3", "mine")
    loss = data["series"][0]
    assert loss["points"] == [[100, 55.0], [200, 50.0], [300, 45.0], [400, 40.0],
                              [500, 35.0], [600, 30.0]]
    assert [s["labels"] for s in data["series"][1:3]] == [{"position": 1}, {"position": 2}]
    every = json.loads(cli(["--session", "s", "metrics", "--json"]).out)
    assert [run["run"] for run in every["runs"]] == ["r3"]  # `quiet` recorded nothing


def test_plot_draws_each_metric_and_compares_with_another_session(recorded: Store,
                                                                   cli) -> None:
    r = cli(["--session", "s", "plot", "mine", "--no-color", "--width", "60", "--height", "10"])
    assert r.code == 0, r.err
    assert "\x1b[" not in r.out
    for title in ("loss by step", "accuracy by epoch", "tau by checkpoint"):
        assert title in r.out
    assert "position 1" in r.out and "untrained" in r.out
    assert sum(0x2801 <= ord(c) < 0x2900 for c in r.out) > 20  # lines drawn in braille
    assert all(len(line) <= 60 for line in r.out.splitlines()[1:])
    # without colour, the two positions' lines are told apart by their glyphs
    accuracy = r.out[r.out.index("accuracy by epoch"):r.out.index("tau by checkpoint")]
    assert "•• position 1" in accuracy and "++ position 2" in accuracy, accuracy
    drawn = "".join(ln.split("┤", 1)[-1] for ln in accuracy.splitlines()
                    if "position" not in ln)
    assert drawn.count("•") > 5 and drawn.count("+") > 5, accuracy

    r = cli(["--session", "s", "plot", "mine", "loss", "--compare", "lastweek:mine",
             "--color", "--width", "70"])
    assert r.code == 0, r.err
    assert "\x1b[" in r.out  # colour, asked for though stdout is no terminal
    assert r.out.splitlines()[0] == "t1 mine r3 (succeeded) against t1 mine r1 (lastweek)"
    assert "s:r3" in r.out and "lastweek:r1" in r.out
    assert "accuracy by epoch" not in r.out


@pytest.mark.parametrize(("args", "message"), [
    (["plot", "mine", "nosuch"], "no series 'nosuch' in t1 mine r3"),
    (["plot", "quiet"], "t2 quiet r4 recorded no series"),
    (["plot", "t9"], "unknown todo t9"),
    (["plot", "mine", "--compare", "nowhere:mine"], "no session 'nowhere'"),
    (["metrics", "r99"], "unknown run r99"),
    (["metrics", "tarin"], "not a todo, stage or run: 'tarin'"),
])
def test_bad_targets_are_one_line_errors(recorded: Store, cli, args: list[str],
                                         message: str) -> None:
    r = cli(["--session", "s", *args])
    assert r.code == 2, r.out
    assert r.err.count("\n") == 1 and message in r.err, r.err
    assert "Traceback" not in r.err


def test_a_session_without_series_says_so(cli) -> None:
    r = cli(["metrics"])
    assert r.code == 0 and "no series recorded yet" in r.out
    r = cli(["add", "something"])
    r = cli(["plot", "t1"])
    assert r.code == 2 and "t1 has no runs yet" in r.err
