"""Stage time limits: overridden per run, scaled, and warned about before they strike."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.runner.deadline import EtaWatch
from pipeline.errors import SpecError
from state.store import Store
from tests.runner.test_runner import make_runner, write_spec

PROGRESS = 'for i in 1 2 3; do echo "[train] $i/100 1.0 samples/s eta {eta}s"; sleep 0.3; done'


def test_an_eta_past_the_time_left_is_warned_about_with_the_fix(tmp_path: Path,
                                                                 store: Store) -> None:
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "train", "timeout": "3s", "run": PROGRESS.format(eta=500) + "; sleep 30"}])
    runner = make_runner(store, spec, rerun="harness run p.yaml")
    report = runner.run()
    warned = [ln for ln in runner.lines if "warning:" in ln]
    assert len(warned) == 1, runner.lines  # said once, not on every progress line
    assert "eta 500s" in warned[0] and "harness run p.yaml --timeout train=15m" in warned[0]
    assert re.search(r"`--timeout-scale 25\d` gives every stage more", warned[0])
    first_warning = runner.lines.index(warned[0])
    assert any("timed out" in ln for ln in runner.lines[first_warning:])
    (_name, why), = report.blocked
    assert "its last progress said eta 500s" in why
    assert "harness run p.yaml --timeout train=" in why and "--retry-blocked" in why
    t = store.todos(runner.sid)[0]
    notes = [e.payload["text"] for e in store.events(runner.sid, todo_id=t.num)
             if e.kind == "todo.noted"]
    assert any(n.startswith("warning: its progress says eta 500s") for n in notes)


def test_an_eta_that_fits_is_not_warned_about(tmp_path: Path, store: Store) -> None:
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "train", "timeout": "5m", "run": PROGRESS.format(eta=2)}])
    runner = make_runner(store, spec)
    assert runner.run().ok
    assert not [ln for ln in runner.lines if "warning:" in ln]


def test_one_noisy_first_estimate_is_not_a_warning() -> None:
    watch = EtaWatch("train", 100.0, "harness run p.yaml")
    assert watch.see("[train] 1/9 0.1 samples/s eta 900s\n", 1.0) is None
    assert watch.see("[train] 2/9 ... eta 40s\n", 6.0) is None
    assert watch.see("[train] 3/9 ... eta 9", 11.0) is None  # a line still being written
    assert watch.see("00s\n", 12.0) is None  # 900 > 88 left, but only once in a row
    assert watch.see("[train] 4/9 ... eta 800s\n", 17.0) is not None


def test_timeout_override_and_scale_give_a_stage_more_time(tmp_path: Path, cli) -> None:
    spec = write_spec(tmp_path / "p.yaml", [
        {"name": "slow", "timeout": "1s", "run": "sleep 2; echo slept"}],
        defaults={"timeout": "1s"})
    tight = cli(["run", str(spec), "-q"])
    assert tight.code == 1 and "timed out after 1s" in tight.out
    more = cli(["run", str(spec), "-q", "--retry-blocked", "--timeout", "slow=1m"])
    assert more.code == 0, more.out
    cli(["session", "new", "again"])
    scaled = cli(["run", str(spec), "-q", "--timeout-scale", "60"])
    assert scaled.code == 0, scaled.out
    dry = cli(["run", str(spec), "--dry-run", "--timeout-scale", "30", "--session", "x"])
    assert "timeout 30s" in dry.out
    dry = cli(["run", str(spec), "--dry-run", "--timeout", "slow=none", "--session", "x"])
    assert "timeout" not in dry.out.split("\n", 1)[1]


def test_defaults_timeout_scale_in_the_spec(tmp_path: Path, cli) -> None:
    spec = write_spec(tmp_path / "p.yaml", [{"name": "slow", "run": "sleep 2"}],
                      defaults={"timeout": "1s", "timeout_scale": 60})
    assert cli(["run", str(spec), "-q"]).code == 0
    bad = write_spec(tmp_path / "bad.yaml", [{"name": "a", "run": "true"}],
                     defaults={"timeout_scale": 0})
    r = cli(["check", str(bad)])
    assert r.code == 1 and "defaults.timeout_scale: bad timeout_scale 0" in r.err


def test_bad_time_options_are_one_line_usage_errors(tmp_path: Path, cli) -> None:
    spec = write_spec(tmp_path / "p.yaml", [{"name": "slow", "run": "true"}])
    for args, needle in ((["--timeout", "slow"], "expected STAGE=DURATION"),
                         (["--timeout", "slow=soon"], "bad duration 'soon'"),
                         (["--timeout", "slo=1m"], "did you mean 'slow'"),
                         (["--timeout-scale", "-1"], "a number above 0"),
                         (["--timeout-scale", "inf"], "a number above 0")):
        r = cli(["run", str(spec), *args])
        assert r.code == 2 and needle in r.err and len(r.err.splitlines()) == 1, (args, r.err)
    assert json.loads(cli(["list", "--json"]).out) == []


def test_scale_is_validated_in_the_spec_model() -> None:
    from pipeline.spec.load import parse_spec

    try:
        parse_spec({"pipeline": "p", "defaults": {"timeout_scale": "2x"},
                    "stages": [{"name": "a", "run": "true"}]})
    except SpecError as exc:
        assert "timeout_scale" in str(exc)
    else:
        raise AssertionError("a bad timeout_scale was accepted")
