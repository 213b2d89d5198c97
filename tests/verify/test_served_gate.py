"""The served gate through `harness run`'s runner: verify on the CPU, then the stand-in vLLM
(tests/fake_vllm.py) serves the same drafter beside a plain baseline, and the benchmark's
gate decides on the engine's numbers.

The stand-in derives acceptance from the drafter's files (a head whose rows were permuted
against d2t drafts wrong tokens), so the sabotaged drafter serves slowly because of what
it is, not because a test told the server so. The τ-agreement case tells the server to
accept less than the drafter can (``--fake-acceptance``): what an engine that feeds the
drafter other hidden states than it trained on looks like from outside.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import todos as uc
from harness.runner import Runner
from state.store import Store
from tests.runner.test_runner import by_stage, make_runner
from tests.serve.helpers import CHAT_PROMPTS, FAKE_COMMAND, kill_fakes, wait_gone, write_spec
from tests.sshd import free_port
from tests.verify.conftest import FUNCTIONAL

pytestmark = [pytest.mark.ml, pytest.mark.slow, pytest.mark.sqlite]


@pytest.fixture
def ports():
    base, spec = free_port(), free_port()
    yield base, spec
    for port in (base, spec):
        kill_fakes(port)


def _serve(name: str, good: dict, port: int, draft: Path | None, *extra: str,
           needs: list[str] | None = None) -> dict:
    with_ = {"target": str(good["verifier"]), "port": port, "command": FAKE_COMMAND,
             "health_timeout": 30, "stop_grace": 3,
             "extra_args": ["--fake-step-ms", "3", *extra]}
    if draft is None:
        with_["speculative"] = False
    else:
        with_.update(draft=str(draft), num_speculative_tokens=3)
    return {"name": name, "action": "eagle3.serve", "with": with_, "needs": needs or []}


def _verify(good: dict, checkpoint: Path, gate: dict) -> dict:
    return {"name": "verify", "action": "eagle3.verify",
            "with": {"checkpoint": str(checkpoint), "verifier": str(good["verifier"]),
                     "data": str(good["prompts"]), "exclude": str(good["exclude"]),
                     **FUNCTIONAL},
            "gate": gate}


def _bench(ports: tuple[int, int], needs: list[str], gate: dict) -> dict:
    base, spec = ports
    return {"name": "benchmark", "action": "eagle3.benchmark", "needs": needs,
            "with": {"url": f"http://127.0.0.1:{spec}",
                     "baseline_url": f"http://127.0.0.1:{base}", "prompts": CHAT_PROMPTS,
                     "concurrency": [1], "max_tokens": 48, "warmup": 0,
                     # the trials have tests of their own: short runs, a short budget
                     "trials": 4, "min_seconds": 0, "requests": 8, "level_budget": 10},
            "gate": gate}


def _run(store: Store, spec: Path, **kw) -> Runner:
    r = make_runner(store, spec, **kw)
    r.run()
    return r


def test_the_sabotaged_drafter_is_blocked_by_the_served_numbers(good, variants, ports,
                                                                store, tmp_path):
    """The tiny sabotaged pipeline's drafter (lm_head rows permuted against d2t), served:
    verify blocks it offline, and the benchmark blocks it on the served speedup, with the
    served figures in the reason."""
    sabotaged = variants("lm_head_permuted")
    spec = write_spec(tmp_path / "served.yaml", {"local": {"workdir": str(tmp_path / "w")}}, [
        _verify(good, sabotaged, {"min_acceptance_length": 2.0}),
        _serve("serve_baseline", good, ports[0], None),
        _serve("serve_spec", good, ports[1], sabotaged),
        _bench(ports, ["serve_baseline", "serve_spec"],
               {"min_served_speedup": {"at": 1, "min": 1.05}, "min_acceptance_length": 1.5}),
    ])
    r = _run(store, spec)
    t = by_stage(store, r.sid)
    assert t["verify"].status == "blocked"
    bench = t["benchmark"]
    assert bench.status == "blocked", "\n".join(r.lines)
    reason = bench.blocked_reason or ""
    # "r4 failed: gate failed: c=1: 0.60x (0.59-0.61, 4 trials); acceptance length 1.03,
    #  rate 0.01, per position 0.03/0.00/0.00; gate needs served_speedup c=1 ≥ 1.05
    #  (measured 0.6029; 95% interval 0.59-0.61x, 4 trials), acceptance_length ≥ 1.5 ..."
    m = re.search(r"gate failed: c=1: (\d\.\d\d)x \((\d\.\d\d)-(\d\.\d\d), \d+ trials"
                  r"(, WIDE)?\); acceptance length (1\.\d\d)", reason)
    assert m, reason
    assert float(m.group(1)) < 1.0 and float(m.group(3)) < 1.0 and float(m.group(5)) < 1.2
    assert re.search(r"gate needs served_speedup c=1 ≥ 1\.05 \(measured 0\.\d+; 95% "
                     r"interval 0\.\d+-0\.\d+x, \d+ trials", reason), reason
    assert "acceptance_length ≥ 1.5 (measured 1" in reason
    # the stand-in's acceptance came from the files: it logged the share of rows that line up
    spec_run = next(x for x in store.runs(r.sid) if x.stage == "serve_spec")
    log, _end = store.log(spec_run.id, 0)
    assert re.search(r"drafter lm_head: [0-9]% of its sampled rows", log), log[-2000:]
    # a benchmark beside a verify stage it does not need is not compared with it
    row = store.verifications(r.sid, todo_id=bench.num)[-1]
    assert not row.passed and "max_served_tau_gap" not in row.gate
    assert "offline_acceptance_length" not in row.metrics
    for port in ports:
        assert wait_gone(port) == []


def test_served_tau_far_from_verifys_blocks_and_a_faithful_engine_passes(good, ports, store,
                                                                         tmp_path):
    """A benchmark after the verify stage of the same checkpoint is held to verify's τ
    within 10% without a gate key; the reason names both numbers. Served as verify
    measured it, the same benchmark passes and the row carries both sides."""
    hosts = {"local": {"workdir": str(tmp_path / "w")}}

    def stages(*accept: str) -> list[dict]:
        return [_verify(good, good["dir"], {"min_acceptance_length": 2.0}),
                _serve("serve_baseline", good, ports[0], None, needs=["verify"]),
                _serve("serve_spec", good, ports[1], good["dir"], *accept, needs=["verify"]),
                _bench(ports, ["serve_baseline", "serve_spec"],
                       {"min_served_speedup": {"at": 1, "min": 0.001}})]

    spec = write_spec(tmp_path / "served.yaml", hosts, stages("--fake-acceptance",
                                                              "0.5,0.2,0.1"))
    r = _run(store, spec)
    t = by_stage(store, r.sid)
    assert t["verify"].status == "completed", t["verify"].blocked_reason
    bench = t["benchmark"]
    assert bench.status == "blocked", "\n".join(r.lines)
    offline = store.verifications(r.sid, todo_id=t["verify"].num)[-1]
    otau = offline.metrics["acceptance_length"]
    row = store.verifications(r.sid, todo_id=bench.num)[-1]
    stau = row.metrics["acceptance_length"]
    assert row.gate["max_served_tau_gap"] == 0.1 and not row.passed
    assert row.metrics["offline_verification"] == offline.id
    assert row.metrics["offline_acceptance_length"] == otau
    gap = abs(stau - otau) / otau
    assert gap > 0.1 and row.metrics["served_tau_gap"] == round(gap, 4)
    assert (f"served τ {stau:.2f} vs offline τ {otau:.2f} of verify v{offline.id}: "
            f"{gap:.0%} apart (tolerance 10%); the engine feeds the drafter differently "
            "from how it was trained") in (bench.blocked_reason or "")

    # The engine fixed: the server accepts as the drafter does offline (verify's own
    # conditional rates), and a rerun of the benchmark alone passes the same check.
    rates = ",".join(str(x) for x in offline.metrics["conditional_acceptance"])
    write_spec(spec, hosts, stages("--fake-acceptance", rates))
    uc.set_status(store, r.sid, bench.id, "pending")
    _run(store, spec, only="benchmark")
    bench = by_stage(store, r.sid)["benchmark"]
    row = store.verifications(r.sid, todo_id=bench.num)[-1]
    assert bench.status == "completed", bench.blocked_reason
    assert row.passed and row.metrics["served_tau_gap"] <= 0.1, row.verdict
    assert "served τ" in row.verdict and f"vs offline τ {otau:.2f}" in row.verdict
    assert len([x for x in store.runs(r.sid) if x.stage == "verify"]) == 1  # not redone
    for port in ports:
        assert wait_gone(port) == []
