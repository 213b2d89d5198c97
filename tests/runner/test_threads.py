"""Threads that fit the machine: a CPU stage on the runner's own machine gets the cores
other work leaves, shared among the CPU stages running here at once, as OMP_NUM_THREADS and
torch's intra-op and inter-op threads; the spec can say otherwise; the stage's log says
what it got. Counts depend on the machine's load, so the tests hold them to their bounds
and the log to its words."""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path

import pytest
import torch

from harness.runner import threads
from pipeline.eagle3.text.datafiles import write_freqs
from pipeline.spec.models import HostSpec, Stage
from state.store import Store
from tests.runner.test_runner import make_runner, write_spec

LOCAL = HostSpec(name="local")


@pytest.fixture(autouse=True)
def _no_count_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the suite may run with one


def stage(**fields: object) -> Stage:
    return Stage(**{"name": "train", "action": "eagle3.train", **fields})


def test_a_cpu_stage_gets_the_free_cores_and_two_at_once_share_them() -> None:
    cores = threads.usable_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    with threads.claim(stage(with_={"device": "cpu"}), LOCAL) as first:
        assert first.threads is not None and 1 <= first.threads <= cores
        assert first.env["OMP_NUM_THREADS"] == str(first.threads)
        assert re.fullmatch(rf"{cores} cores?, \d+\.\d busy with other work, 1 stage running "
                            "here", first.env["HARNESS_THREADS_WHY"]), first.why
        # a second stage while the first runs (another `harness run`, say) counts it
        with threads.claim(stage(), LOCAL) as second:
            assert second.threads is not None
            assert second.threads <= max(1, cores // 2)
            assert second.why.endswith("2 stages running here"), second.why
    with threads.claim(stage(), LOCAL) as again:  # both ended: alone again
        assert again.why.endswith("1 stage running here")


def test_what_our_own_stages_left_in_the_load_average_is_not_other_work(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a two-thread stage that ran a minute and just ended leaves 2 (1 - 1/e) in the
    # one-minute load average; one that ended two minutes ago, that times 1/e^2
    now = time.monotonic()
    monkeypatch.setattr(threads, "_RAN", [(2, now - 60, now)])
    assert threads._left_in_load_average() == pytest.approx(2 * (1 - math.exp(-1)), rel=0.01)
    monkeypatch.setattr(threads, "_RAN", [(2, now - 180, now - 120)])
    assert threads._left_in_load_average() == pytest.approx(
        2 * (1 - math.exp(-1)) * math.exp(-2), rel=0.01)
    with threads.claim(stage(), LOCAL) as share:  # and a stage's own run is remembered
        assert share.threads is not None
    assert threads._RAN[-1][0] == share.threads


def test_a_slot_whose_runner_died_does_not_count(tmp_path: Path) -> None:
    folder = threads._slots_dir()
    folder.mkdir(parents=True, exist_ok=True)
    dead = folder / "999999999-dead"
    dead.write_text("2")  # nobody holds it locked
    with threads.claim(stage(), LOCAL) as share:
        assert share.why.endswith("1 stage running here"), share.why
    assert not dead.exists()


def test_the_spec_or_the_user_can_say_how_many() -> None:
    with threads.claim(stage(env={"OMP_NUM_THREADS": "3"}), LOCAL) as share:
        assert share.threads == 3 and "OMP_NUM_THREADS" not in share.env  # the spec's stays
        assert share.env["HARNESS_THREADS_WHY"] == "OMP_NUM_THREADS=3 from the spec's env"
    host = HostSpec(name="local", env={"OMP_NUM_THREADS": "2"})
    with threads.claim(stage(), host) as share:
        assert share.threads == 2
    with threads.claim(stage(with_={"threads": 4}), LOCAL) as share:
        assert share.threads == 4 and share.env["OMP_NUM_THREADS"] == "4"
        assert share.env["HARNESS_THREADS_WHY"] == "with: threads: 4"
    os.environ["OMP_NUM_THREADS"] = "1"  # exported by hand before `harness run`
    with threads.claim(stage(), LOCAL) as share:
        assert share.threads == 1 and "OMP_NUM_THREADS" not in share.env
        assert share.why == "OMP_NUM_THREADS=1 from the environment of harness run"


@pytest.mark.parametrize("other", [
    stage(with_={"device": "cuda"}),
    Stage(name="serve", action="eagle3.serve"),
    Stage(name="shell", run="python train.py"),
])
def test_gpu_serving_and_shell_stages_are_left_alone(other: Stage) -> None:
    with threads.claim(other, LOCAL) as share:
        assert share.threads is None and share.env == {} and share.line() == ""


def test_stages_on_other_hosts_are_left_alone() -> None:
    remote = HostSpec(name="gpu", host="gpu-box")
    with threads.claim(stage(), remote) as share:
        assert share.threads is None and share.env == {}


def _vocab_spec(tmp_path: Path, **extra: object) -> Path:
    work = tmp_path / "work"
    (work / "verifier").mkdir(parents=True)
    (work / "verifier" / "config.json").write_text(
        '{"vocab_size": 64, "hidden_size": 8, "num_hidden_layers": 2}')
    (work / "tokens").mkdir()
    write_freqs(work / "tokens", torch.arange(64, dtype=torch.int64))
    return write_spec(tmp_path / "p.yaml", [
        {"name": "vocab", "action": "eagle3.vocab", **extra,
         "with": {"freqs": "tokens", "verifier": "verifier", "draft_vocab": 16,
                  "out": "vocab.safetensors", **extra.pop("with", {})}}])  # type: ignore[arg-type]


@pytest.mark.parametrize(("extra", "said"), [
    ({}, r"threads: (\d+) intra-op, \1 inter-op \(\d+ cores?, \d+\.\d busy with other work, "
         r"1 stage running here\)"),
    ({"with": {"threads": 1}}, r"threads: 1 intra-op, 1 inter-op \(with: threads: 1\)"),
    ({"env": {"OMP_NUM_THREADS": "1"}},
     r"threads: 1 intra-op, 1 inter-op \(OMP_NUM_THREADS=1 from the spec's env\)"),
], ids=["fitted", "with", "env"])
@pytest.mark.sqlite
def test_the_stage_log_says_what_it_got(tmp_path: Path, store: Store, extra: dict,
                                        said: str) -> None:
    runner = make_runner(store, _vocab_spec(tmp_path, **extra))
    report = runner.run()
    assert report.ok, runner.lines  # type: ignore[attr-defined]
    run = store.runs()[-1]
    log, _end = store.log(run.id)
    assert re.search(said, log), log
    started = next(ln for ln in runner.lines if "started r" in ln)  # type: ignore[attr-defined]
    assert re.search(r"; \d+ CPU threads?: ", started), started
