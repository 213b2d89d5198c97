"""Scripted trials through the benchmark's own order and stopping rule: ABBA order, the
interval, drift that cancels, one outlier that cannot decide a level alone, and the three
gate outcomes (passed, failed, undecided) read from the metrics the benchmark writes.

Each scripted run is a Level whose throughput the test chooses, on a clock the test moves
(one second a run), so the rule is exercised exactly and without servers; the same
``measure`` drives the real servers in the benchmark (tests/serve/test_trials.py).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.gates import gate_items
from pipeline.actions import StageResult
from pipeline.eagle3.serving.load_levels import Level
from pipeline.eagle3.serving.results import Server, conclude
from pipeline.eagle3.serving.sequential import Rule, measure
from pipeline.eagle3.serving.trials import interval, trial_order, verdicts
from pipeline.gates import parse_gate
from pipeline.vllm.openai_client import StreamTiming

BASE, SPEC = Server("baseline", "http://b", "m"), Server("spec", "http://s", "m")


@dataclass
class Script:
    """Tokens/s per run: ``rate(role, c, trial, t)`` with ``t`` the clock when it starts."""

    rate: Callable[[str, int, int, float], float]
    now: float = 0.0

    def clock(self) -> float:
        return self.now

    def run(self, server: Server, c: int, trial: int) -> Level:
        tokens = 1000
        seconds = tokens / self.rate(server.role, c, trial, self.now)
        self.now += 1.0  # every run takes a second of the level's budget
        lv = Level(server.role, server.url, c, 1, trial=trial, duration=seconds)
        lv.records.append((0, StreamTiming(ok=True, output_tokens=tokens, ttft=0.01,
                                           latency=seconds, token_ids=[1, 2, 3])))
        return lv


def _measure(script: Script, rule: Rule, concurrency=(1,)) -> tuple[list[Level],
                                                                    dict[int, str]]:
    levels: list[Level] = []
    lines: list[str] = []
    stops = measure([BASE, SPEC], list(concurrency), rule, script.run, levels, ["p"],
                    clock=script.clock, out=lines.append)
    return levels, stops


def _metrics(tmp_path: Path, levels: list[Level], stops: dict[int, str],
             rule: Rule) -> dict:
    args = argparse.Namespace(
        trials=rule.trials, max_trials=rule.max_trials, ci_width=rule.ci_width,
        confidence=rule.confidence, level_budget=rule.level_budget, min_seconds=1.0,
        output_len=None, ignore_eos=False, max_tokens=16, temperature=0.0,
        schedule_out=None, sweep=None, require_spec_metrics=False)
    result = StageResult(action="eagle3.benchmark")
    conclude(result, levels, [BASE, SPEC], args, out_path=tmp_path / "bench.json",
             interrupted=None, prompt_ids=["p"], stops=stops)
    return result.metrics


def _held(metrics: dict, least: float) -> str:
    (item,) = gate_items(parse_gate({"min_served_speedup": {"at": 1, "min": least}}),
                         metrics)
    return item.outcome


def test_trials_alternate_abba() -> None:
    assert trial_order(["b", "x", "y"], 1) == ["b", "x", "y"]
    assert trial_order(["b", "x", "y"], 2) == ["y", "x", "b"]
    script = Script(lambda role, c, trial, t: 100.0 * (1.5 if role == "spec" else 1.0))
    levels, stops = _measure(script, Rule(trials=4))
    assert [(lv.trial, lv.role) for lv in levels] == [
        (1, "baseline"), (1, "spec"), (2, "spec"), (2, "baseline"),
        (3, "baseline"), (3, "spec"), (4, "spec"), (4, "baseline")]
    assert stops == {1: "settled"}


def test_a_linear_drift_cancels_over_abba_blocks() -> None:
    """The host slows down 3% a run: in A B order every trial's ratio is biased the same
    way; in ABBA order the pairs' biases are opposite and the estimate is the true 1.5x."""
    def rate(role: str, c: int, trial: int, t: float) -> float:
        return 100.0 * (1.5 if role == "spec" else 1.0) * (1 - 0.03 * t)
    levels, _ = _measure(Script(rate), Rule(trials=4, max_trials=4))
    (v,) = verdicts(levels, "spec", ["p"]).values()
    assert v.speedups[0] < 1.5 < v.speedups[1]  # each pair leans its own way
    assert v.estimate == pytest.approx(1.5, rel=2e-3)
    always_ab = [100 * 1.5 * (1 - 0.03 * (2 * i + 1)) / (100 * (1 - 0.03 * 2 * i))
                 for i in range(4)]
    assert interval(always_ab).estimate < 1.47  # what the order A B, A B... would report


def test_a_host_whose_speed_moves_is_named_with_plains_own_runs(tmp_path: Path,
                                                               capsys) -> None:
    """Plain's own tokens/s over the level's runs: 21% apart here, and the line says so;
    a steady host gets no line."""
    def drifting(role: str, c: int, trial: int, t: float) -> float:
        return 100.0 * (1.5 if role == "spec" else 1.0) * (1 + 0.03 * t)
    rule = Rule(trials=4, max_trials=4)
    m = _metrics(tmp_path, *_measure(Script(drifting), rule), rule)
    out = capsys.readouterr().out
    # plain runs at t = 0, 3, 4, 7 (ABBA): 1.00, 1.09, 1.12, 1.21
    assert m["baseline_spread_c1"] == pytest.approx(0.21, rel=1e-3)
    assert "note: c=1: plain's own tokens/s moved 21% over its 4 runs (100, 109, 112, 121)" \
        in out
    steady = _metrics(tmp_path, *_measure(Script(lambda r, c, n, t: 150.0 if r == "spec"
                                                 else 100.0), rule), rule)
    assert steady["baseline_spread_c1"] == 0.0
    assert "plain's own tokens/s moved" not in capsys.readouterr().out


def test_the_interval_is_students_t_on_the_log_speedups() -> None:
    from scipy import stats

    ratios = [1.42, 1.55, 1.48, 1.51, 1.39, 1.6]
    ci = interval(ratios)
    logs = [math.log(x) for x in ratios]
    lo, hi = stats.t.interval(0.95, len(logs) - 1, loc=sum(logs) / len(logs),
                              scale=stats.sem(logs))
    assert (ci.low, ci.high) == (pytest.approx(math.exp(lo)), pytest.approx(math.exp(hi)))
    assert ci.estimate == pytest.approx(math.exp(sum(logs) / len(logs)))
    assert ci.half_width == pytest.approx(max(ci.high / ci.estimate - 1,
                                              1 - ci.low / ci.estimate))


def test_one_outlier_trial_does_not_decide_the_level(tmp_path: Path) -> None:
    """Trial 3's candidate run is slow (1.1x against 1.5x in every other trial): after
    four trials the interval is wide and straddles 1.3, so the level runs on; the trials
    that follow outweigh the outlier and the gate passes."""
    def rate(role: str, c: int, trial: int, t: float) -> float:
        if role == "baseline":
            return 100.0
        return 110.0 if trial == 3 else 150.0 * (1 + 0.01 * (trial % 3))
    rule = Rule(trials=4, max_trials=30, level_budget=1000)
    levels, stops = _measure(Script(rate), rule)
    first_four = verdicts([lv for lv in levels if lv.trial <= 4], "spec", ["p"])[1]
    assert first_four.interval.low < 1.3 < first_four.interval.high  # undecided then
    trials = max(lv.trial for lv in levels)
    assert trials > 4 and stops == {1: "settled"}
    m = _metrics(tmp_path, levels, stops, rule)
    assert m["speedup_trials_c1"] == trials and m["stopped_c1"] == "settled"
    assert m["speedup_low_c1"] >= 1.3 and _held(m, 1.3) == "passed"


def test_the_three_outcomes(tmp_path: Path) -> None:
    # a clear loss fails: the whole interval is below the threshold
    loss = Script(lambda role, c, trial, t: 100.0 * (0.9 + 0.005 * (trial % 2)
                                                     if role == "spec" else 1.0))
    levels, stops = _measure(loss, Rule(trials=4))
    m = _metrics(tmp_path, levels, stops, Rule(trials=4))
    assert m["speedup_high_c1"] < 1.0 and _held(m, 1.0) == "failed"
    # noise that never narrows within the budget, around the threshold: undecided
    noisy = Script(lambda role, c, trial, t: 100.0 * ((1.45 if trial % 2 else 1.15)
                                                      if role == "spec" else 1.0))
    rule = Rule(trials=4, max_trials=30, level_budget=10)
    levels, stops = _measure(noisy, rule)
    assert stops == {1: "budget"}
    m = _metrics(tmp_path, levels, stops, rule)
    assert m["speedup_low_c1"] < 1.3 < m["speedup_high_c1"]
    assert m["speedup_settled_c1"] is False and m["unsettled_levels"] == [1]
    assert _held(m, 1.3) == "undecided"
    (item,) = gate_items(parse_gate({"min_served_speedup": {"at": 1, "min": 1.3}}), m)
    assert "its 10 s budget ran out" in item.line
    # ... and the same trials decide a threshold outside the interval
    assert _held(m, 1.0) == "passed"
    # max_trials ends a level as well
    levels, stops = _measure(Script(noisy.rate), Rule(trials=4, max_trials=6,
                                                      level_budget=1000))
    assert stops == {1: "max_trials"} and max(lv.trial for lv in levels) == 6


def test_one_trial_measures_each_level_once_and_gives_no_interval(tmp_path: Path) -> None:
    script = Script(lambda role, c, trial, t: 100.0 * (1.6 if role == "spec" else 1.0))
    rule = Rule(trials=1)
    levels, stops = _measure(script, rule, concurrency=(1, 4))
    assert stops == {1: "one trial", 4: "one trial"} and len(levels) == 4
    m = _metrics(tmp_path, levels, stops, rule)
    assert m["speedup_c1"] == pytest.approx(1.6) and "speedup_low_c1" not in m
    assert _held(m, 1.3) == "undecided"


def _noisy(spread: dict[int, float]) -> Callable[[str, int, int, float], float]:
    """Plain at 100 tok/s; the candidate at 1.5x, moved by +-``spread[c]`` every trial."""
    def rate(role: str, c: int, trial: int, t: float) -> float:
        if role != "spec":
            return 100.0
        return 150.0 * (1 + spread[c] * (1 if trial % 2 else -1))
    return rate


def test_extra_time_goes_to_the_levels_still_wide_until_they_settle(tmp_path: Path) -> None:
    # c=1 settles in 4 trials; c=16 (+-10% a trial) is wide when its 8 s run out, and the
    # pooled extra time takes it, a whole ABBA block at a time, to +-5%
    script = Script(_noisy({1: 0.0, 16: 0.10}))
    rule = Rule(trials=4, max_trials=40, level_budget=8, extra_budget=120)
    lines: list[str] = []
    levels: list[Level] = []
    stops = measure([BASE, SPEC], [1, 16], rule, script.run, levels, ["p"],
                    clock=script.clock, out=lines.append)
    assert stops == {1: "settled", 16: "settled"}
    trials = {c: max(lv.trial for lv in levels if lv.concurrency == c) for c in (1, 16)}
    assert trials[1] == 4 and 4 < trials[16] < 40 and trials[16] % 2 == 0
    (v,) = verdicts([lv for lv in levels if lv.concurrency == 16], "spec", ["p"]).values()
    assert v.settled and v.interval.half_width <= 0.05
    # the extra trials keep the ABBA order of their level
    extra = [(lv.trial, lv.role) for lv in levels if lv.concurrency == 16 and lv.trial > 4]
    assert extra[:4] == [(5, "baseline"), (5, "spec"), (6, "spec"), (6, "baseline")]
    assert any(line.startswith("[c=16] after 6 trials (") and "of the extra 120" in line
               for line in lines), lines
    assert _metrics(tmp_path, levels, stops, rule)["unsettled_levels"] == []
    # without it, c=16 stops wide at its own budget
    without = Script(_noisy({1: 0.0, 16: 0.10}))
    _levels, stops = _measure(without, Rule(trials=4, max_trials=40, level_budget=8),
                              concurrency=(1, 16))
    assert stops == {1: "settled", 16: "budget"}


def test_the_level_nearest_to_settling_gets_the_extra_time_first() -> None:
    # both wide after 4 trials; c=4 (+-4%) needs a block or so, c=16 (+-10%) a dozen: with
    # time for two blocks, c=4 settles and c=16 gets what is left
    script = Script(_noisy({4: 0.04, 16: 0.10}))
    rule = Rule(trials=4, max_trials=40, level_budget=8, extra_budget=6)
    levels, stops = _measure(script, rule, concurrency=(16, 4))
    assert stops == {16: "budget", 4: "settled"}
    trials = {c: max(lv.trial for lv in levels if lv.concurrency == c) for c in (4, 16)}
    assert trials == {4: 6, 16: 6}
    order = [lv.concurrency for lv in levels if lv.trial > 4]
    assert order == [4] * 4 + [16] * 4  # c=4's block first, though c=16 was measured first
