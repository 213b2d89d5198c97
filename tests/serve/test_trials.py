"""Levels that measure something: paired trials in ABBA order, the interval they give,
several candidates against one baseline, the sweep's schedule, and fixed against natural
lengths.

The benchmark runs for real against stand-in servers; no test asserts a speedup's size
(a loaded machine decides that), only what the figures are made of: each trial's speedup
is the ratio of that trial's throughputs, the gated figure their geometric mean with its
interval, the schedule the fastest measured k per level that vLLM can start. The rule
itself is tested on scripted trials in tests/serve/test_sequential.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.gates import gate_items
from pipeline.eagle3.serving.load_levels import Level
from pipeline.eagle3.serving.trials import Spread, interval, verdicts
from pipeline.gates import parse_gate
from pipeline.vllm import schedule as sched
from pipeline.vllm.openai_client import StreamTiming
from tests.serve.helpers import CHAT_PROMPTS
from tests.serve.test_benchmark import COMPLETION_PROMPTS, benchmark, sent


def spec(k: int) -> dict:
    return {"method": "eagle3", "model": "d", "num_speculative_tokens": k}


def _level(role: str, c: int, trial: int, tokens: int, seconds: float) -> Level:
    lv = Level(role, "http://x", c, 1, trial=trial, duration=seconds)
    lv.records.append((0, StreamTiming(ok=True, output_tokens=tokens, ttft=0.01,
                                       latency=seconds)))
    return lv


def test_a_trials_speedup_is_against_the_baseline_of_the_same_trial() -> None:
    # the host slows down in trial 2 (both servers): the ratio per trial does not see it
    levels = [_level("baseline", 1, 1, 100, 1.0), _level("spec", 1, 1, 150, 1.0),
              _level("baseline", 1, 2, 100, 2.0), _level("spec", 1, 2, 140, 2.0),
              _level("baseline", 1, 3, 100, 1.0), _level("spec", 1, 3, 160, 1.0)]
    (v,) = verdicts(levels, "spec", ["p"], ci_width=0.1).values()
    assert v.speedups == pytest.approx([1.5, 1.4, 1.6])
    assert v.estimate == pytest.approx((1.5 * 1.4 * 1.6) ** (1 / 3))
    assert v.speedup == Spread(pytest.approx(1.5), pytest.approx(1.4), pytest.approx(1.6), 3)
    ci = v.interval
    assert ci.low < 1.4 and ci.high > 1.6 and ci.n == 3
    assert v.settled is False and v.word() == "WIDE"  # three spread trials: +-16%
    one = verdicts(levels[:2], "spec", ["p"])[1]
    assert one.interval.low is None and not one.settled and one.word() == "1 trial"


def test_paired_trials_against_real_servers_give_an_interval_the_gate_holds(
        tmp_path: Path, fake_server) -> None:
    base, _ = fake_server()
    fast, _ = fake_server(spec=spec(3))
    code, doc, out = benchmark(tmp_path, "--url", fast, "--baseline-url", base, "--prompts",
                               COMPLETION_PROMPTS, "--concurrency", "[1, 2]", "--max-tokens",
                               "12", "--warmup", "0", "--trials", "4", "--requests", "6",
                               "--min-seconds", "0", "--level-budget", "3",
                               "--max-trials", "6")
    assert code == 0, out
    m = doc["metrics"]
    assert m["trials"] == 4 and m["speedup_figure"].startswith("geometric mean of paired")
    levels = m["levels"]
    # level by level, ABBA: baseline first in odd trials, last in even ones
    assert [(lv["concurrency"], lv["trial"], lv["role"]) for lv in levels[:4]] == [
        (1, 1, "baseline"), (1, 1, "spec"), (1, 2, "spec"), (1, 2, "baseline")]
    for c in (1, 2):
        by = {(lv["role"], lv["trial"]): lv for lv in levels if lv["concurrency"] == c}
        trials = sorted({t for _r, t in by})
        assert len(trials) % 2 == 0 and 4 <= len(trials) <= 6
        ratios = [by[("spec", t)]["output_throughput"] / by[("baseline", t)]
                  ["output_throughput"] for t in trials]
        ci = interval(ratios)
        assert m[f"speedup_c{c}"] == pytest.approx(ci.estimate, rel=1e-3)
        assert m[f"speedup_low_c{c}"] == pytest.approx(ci.low, rel=1e-3)
        assert m[f"speedup_high_c{c}"] == pytest.approx(ci.high, rel=1e-3)
        assert m[f"speedup_trials_c{c}"] == len(trials)
        assert m[f"stopped_c{c}"] in ("settled", "budget", "max_trials")
        assert m[f"speedup_settled_c{c}"] is (ci.half_width <= 0.05)
        row = next(r for r in m["served_table"] if r["concurrency"] == c)
        assert row["trials"] == len(trials) and row["speedup"] == m[f"speedup_c{c}"]
        assert row["interval"] == [m[f"speedup_low_c{c}"], m[f"speedup_high_c{c}"]]
        assert set(row["spec"]) == {"tpot_p50_ms", "itl_p50_ms", "itl_p99_ms",
                                    "ttft_p50_ms", "ttft_p99_ms"}
    # every trial's answers were compared with the baseline's
    assert m["outputs_equal"] == 1.0
    table = out[out.index("served (vLLM"):]
    assert "ABBA order" in table and "interval" in table and "TTFT p99" in table
    assert "[c=1] after 4 trials" in out
    # the gate holds the interval, and its line says so
    (item,) = gate_items(parse_gate({"min_served_speedup": {"at": 1, "min": 0.001}}), m)
    assert item.outcome == "passed" and item.value == m["speedup_c1"]
    assert "95% interval" in item.line


def test_a_level_lasts_min_seconds_and_ends_at_a_whole_pass(tmp_path: Path,
                                                            fake_server) -> None:
    url, record = fake_server(spec=spec(3))
    code, doc, out = benchmark(tmp_path, "--url", url, "--prompts", COMPLETION_PROMPTS,
                               "--concurrency", "[2]", "--max-tokens", "8", "--warmup", "0",
                               "--requests", "1", "--min-seconds", "0.6")
    assert code == 0, out
    (level,) = doc["metrics"]["levels"]
    prompts = len(Path(COMPLETION_PROMPTS).read_text().splitlines())
    assert level["duration_s"] >= 0.6
    assert level["requests"] % prompts == 0 and level["requests"] >= prompts
    texts = [b["body"]["messages"][0]["content"] for b in sent(record)]
    assert all(texts.count(t) == level["requests"] // prompts for t in set(texts))
    assert "each run >= 0.6 s" in out


def test_fixed_and_natural_lengths_are_reported(tmp_path: Path, fake_server) -> None:
    url, record = fake_server("--fake-natural-len", spec=spec(3))
    args = ("--url", url, "--prompts", COMPLETION_PROMPTS, "--concurrency", "[1]",
            "--max-tokens", "40", "--warmup", "0", "--requests", "16")
    code, doc, out = benchmark(tmp_path, *args)
    assert code == 0, out
    m = doc["metrics"]
    assert m["lengths"] == ("natural: each answer ends where the model ends it, at most 40 "
                            "tokens")
    assert "output_len" not in m and m["mean_output_tokens"] < 40
    assert not any(r["body"].get("ignore_eos") for r in sent(record))
    code, doc, out = benchmark(tmp_path, *args, "--output-len", "9")
    assert code == 0, out
    m = doc["metrics"]
    assert m["output_len"] == 9 and m["mean_output_tokens"] == 9
    assert m["lengths"] == "9 tokens each (output_len, ignore_eos)"
    last = sent(record)[-16:]
    assert all(r["body"]["ignore_eos"] is True and r["body"]["max_tokens"] == 9 for r in last)
    assert "lengths: 9 tokens each" in out


def test_several_candidates_share_one_baseline_and_the_sweep_writes_a_schedule(
        tmp_path: Path, fake_server) -> None:
    base, base_record = fake_server()
    k1, _ = fake_server("--fake-acceptance", "0.9", spec=spec(1))
    k3, _ = fake_server("--fake-acceptance", "0.9,0.7,0.5", spec=spec(3))
    out_file = tmp_path / "schedule.json"
    code, doc, out = benchmark(tmp_path, "--url", json.dumps({"k3": k3, "k1": k1}),
                               "--baseline-url", base, "--prompts", COMPLETION_PROMPTS,
                               "--concurrency", "[1, 4]", "--max-tokens", "12",
                               "--warmup", "0", "--requests", "8",
                               "--schedule-out", str(out_file))
    assert code == 0, out
    m = doc["metrics"]
    roles = [(lv["concurrency"], lv["role"]) for lv in m["levels"]]
    assert roles == [(1, "baseline"), (1, "k3"), (1, "k1"), (4, "baseline"), (4, "k3"),
                     (4, "k1")]  # the baseline measured once per level for both
    assert len(sent(base_record)) == 8 + 8
    # the first candidate's figures are the metrics; the others' are under candidates
    assert m["num_draft_tokens"] == 3 * m["num_drafts"]
    assert m["candidates"]["k1"]["k"] == 1 and m["candidates"]["k1"]["url"] == k1
    assert {r["candidate"] for r in m["served_table"]} == {"k3", "k1"}
    assert "spec = k3" in out and "spec = k1" in out
    assert "every candidate" in out and "k3 (k=3)" in out and "k1 (k=1)" in out
    # the schedule: per level the k whose smallest trial was fastest, 0 where none beat
    # plain, as measured here (whatever the machine made of the fakes' timing)
    written = json.loads(out_file.read_text())
    schedule = sched.check(written[sched.KEY])
    speedups = {1: {"k3": m["speedup_c1"], "k1": m["candidates"]["k1"]["speedup_c1"]},
                4: {"k3": m["speedup_c4"], "k1": m["candidates"]["k1"]["speedup_c4"]}}
    # with vLLM's default CUDA graphs, one k: the one whose speedups are best together
    mean = {n: (speedups[1][n] * speedups[4][n]) ** 0.5 for n in ("k3", "k1")}
    fixed = {"k3": 3, "k1": 1}[max(mean, key=lambda n: mean[n])]
    assert schedule == [(1, 1024, fixed)] and written["best_fixed_k"] == fixed
    for c, row in speedups.items():
        level = next(x for x in written["levels"] if x["concurrency"] == c)
        assert level["by_k"] == {"3": row["k3"], "1": row["k1"]} and level["k"] == fixed
        fastest = {"k3": 3, "k1": 1}[max(row, key=lambda n: row[n])]
        assert level["gave_up"] == (None if fastest == fixed else
                                    {"k": fastest, "speedup": row[f"k{fastest}"]})
    assert schedule[0][0] == 1 and written["num_speculative_tokens"] == sched.needed_k(
        schedule)
    assert m["schedule"] == [list(e) for e in schedule]
    assert str(out_file) in doc["artifacts"]

    # a later run holds a candidate against the best fixed k of that sweep
    code, doc, out = benchmark(tmp_path, "--url", k3, "--baseline-url", base, "--prompts",
                               COMPLETION_PROMPTS, "--concurrency", "[1, 4]", "--max-tokens",
                               "12", "--warmup", "0", "--requests", "8", "--sweep",
                               str(out_file))
    assert code == 0, out
    rows = {r["concurrency"]: r for r in doc["metrics"]["against_sweep"]}
    for c, row in speedups.items():
        best_name = max(row, key=lambda n: row[n])
        assert rows[c]["best_fixed_k"] == {"k3": 3, "k1": 1}[best_name]
        assert rows[c]["best_fixed_speedup"] == row[best_name]
        assert rows[c]["beats_best_fixed_k"] == (doc["metrics"][f"speedup_c{c}"] >=
                                                 row[best_name])
    assert "against the sweep's best fixed k" in out


@pytest.mark.parametrize("args, message", [
    (["--trials", "0"], "trials must be at least 1, got 0"),
    (["--min-seconds", "-1"], "min_seconds must be >= 0"),
    (["--output-len", "0"], "output_len must be at least 1 token"),
    (["--ci-width", "5"], "ci_width is a share of the estimate between 0 and 1"),
    (["--trials", "4", "--max-trials", "2"], "max_trials (2) is below trials (4)"),
    (["--confidence", "95"], "confidence is a level between 0.5 and 1"),
    (["--level-budget", "0"], "level_budget must be > 0 seconds"),
    (["--extra-budget", "-5"], "extra_budget must be >= 0 seconds, got -5"),
    (["--tie-margin", "-0.1"], "tie_margin is in nats and >= 0 (0: exact equality), got "
                               "-0.1"),
    (["--url", '{"baseline": "http://x"}'], "'baseline' names the baseline_url"),
    (["--schedule-out", "s.json"], "a schedule is chosen by speedup over plain: give "
                                   "baseline_url"),
    (["--schedule-from", '["k9"]'], "schedule_from must list candidate names of `url`"),
    (["--sweep", "missing.json"], "missing.json: cannot read the sweep's file"),
])
def test_bad_trial_settings_fail_in_one_line(tmp_path: Path, fake_server, args: list[str],
                                             message: str) -> None:
    url, _ = fake_server(spec=spec(3))
    if "--url" not in args:
        args = ["--url", url, *args]
    code, doc, out = benchmark(tmp_path, *args, "--prompts", CHAT_PROMPTS)
    assert code != 0 and "Traceback" not in out
    assert message in (doc.get("error") or out), out
