"""The served half of examples/eagle3-h200.yaml, as written, through the harness against the
stand-in vLLM: six servers started together, the sweep writing the schedule, the schedule
served, the benchmark against plain and the sweep, and vllm bench serve beside ours. Only
what the H200 has and this machine has not is changed: the server command, the ports,
and lengths and trials small enough for a test. A mistake in the example's parameters or
the order of its stages fails here, not after ten minutes of device time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.runner import Runner
from pipeline.spec.load import load_spec
from pipeline.vllm import schedule as sched
from state.store import Store
from tests.conftest import ROOT
from tests.serve import vllm_bench
from tests.serve.helpers import FAKE_COMMAND, kill_fakes, make_models, wait_gone
from tests.serve.test_benchmark import tiny_tokenizer
from tests.sshd import free_port

# the store is not what this tests (tests/serve/test_parallel_start.py runs both)
pytestmark = [pytest.mark.ml, pytest.mark.slow, pytest.mark.sqlite]
SERVED = ("serve_baseline", "serve_k3", "serve_k5", "serve_k3_v1", "serve_peagle",
          "sweep", "serve_schedule", "benchmark_peagle", "benchmark", "reference")


def _served_spec(work: Path, ports: dict[int, int], bench_site: str) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "eagle3-h200.yaml").read_text())
    stages = {s["name"]: s for s in doc["stages"] if s["name"] in SERVED}
    assert sorted(stages) == sorted(SERVED)
    out = []
    for name, stage in stages.items():  # in the example's order
        w = stage.get("with") or {}
        if stage.get("action") == "eagle3.serve":
            w["port"] = ports[w["port"]]
            w.update(command=FAKE_COMMAND, extra_args=["--fake-step-ms", "2"],
                     health_timeout=60)
            if w.get("draft") == "drafter_peagle":  # the stand-in serves any drafter
                w["draft"] = "drafter"
        stage["needs"] = [n for n in stage.get("needs", []) if n in SERVED]
        if stage.get("action") == "eagle3.benchmark":
            w["url"] = {k: _port(v, ports) for k, v in w["url"].items()}
            w["baseline_url"] = _port(w["baseline_url"], ports)
            w.update(concurrency=[1, 4], requests=6, min_seconds=0, warmup=1,
                     trials=1 if name == "sweep" else 2, max_trials=2)
            stage.pop("gate", None)  # τ against verify (not run here); speed: the machine's
            if name == "benchmark":  # a gate no server meets: the reference runs all the same
                stage["gate"] = {"min_served_speedup": {"at": 1, "min": 100}}
        if name == "reference":
            run = stage["run"]
            for old, new in ports.items():
                run = run.replace(f":{old} ", f":{new} ")
            stage["run"] = run.replace("--concurrency 1,4,16,64", "--concurrency 1,4").replace(
                "--min-seconds 2", "--min-seconds 0 --requests 4").replace(
                "--warmup 4", f"--warmup 0 --vllm-pythonpath {bench_site}")
        out.append(stage)
    doc["stages"] = out
    doc["hosts"]["local"]["workdir"] = str(work)
    path = work.parent / "h200-served.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _port(url: str, ports: dict[int, int]) -> str:
    head, _, port = url.rpartition(":")
    return f"{head}:{ports[int(port)]}"


def test_the_h200_examples_served_stages_run_as_written(tmp_path: Path, store: Store,
                                                        monkeypatch) -> None:
    bench_site = vllm_bench.pythonpath()
    work = tmp_path / "work"
    make_models(work)  # work/verifier, work/drafter, as the example's stages leave them
    tiny_tokenizer(work / "verifier")
    (work / "data" / "generated").mkdir(parents=True)
    (work / "data" / "prompts.jsonl").write_text("".join(
        json.dumps({"id": f"q{i:05d}", "messages": [{"role": "user", "content": f"q {i}"}]})
        + "\n" for i in range(9)))
    (work / "data" / "generated" / "samples.jsonl").write_text(json.dumps(
        {"id": "q00000", "messages": [{"role": "user", "content": "q 0"}]}) + "\n")
    ports = {p: free_port() for p in (8000, 8003, 8004, 8005, 8006, 8007)}
    monkeypatch.setenv("HARNESS_REPO", str(ROOT))
    spec = _served_spec(work, ports, bench_site)
    sid = store.create_session("s", actor="human")
    lines: list[str] = []
    try:
        report = Runner(store, sid, load_spec(spec), out=lines.append, poll_interval=0.05).run()
        # the benchmark's gate failed it, and the reference, which needs only the servers,
        # was measured after it
        assert [b[0] for b in report.blocked] == ["benchmark"], "\n".join(lines[-80:])
        assert report.blocked[0][1].startswith("r") and "gate failed: " in report.blocked[0][1]
        assert not report.waiting and "reference" in report.completed
        # the servers started together, the sweep waited for its three once, and
        # benchmark_peagle for P-EAGLE's and the V1 runner's (the schedule's server is
        # waited for by its own stage)
        waits = [ln for ln in lines if "started without waiting:" in ln]
        assert [w.split(" server(s)")[0] for w in waits] == [
            "[sweep] waiting for 3", "[benchmark_peagle] waiting for 2"], waits
        # the sweep's schedule, as eagle3.serve read it and served it: with vLLM's default
        # CUDA graphs, one k for every batch size, the sweep's best fixed k
        schedule = sched.load(str(work / "schedule.json"))
        written = json.loads((work / "schedule.json").read_text())
        assert len(schedule) == 1 and schedule[0][2] == written["best_fixed_k"]
        assert sched.capture_problem(schedule) is None
        runs = {r.stage: r for r in store.runs(sid)}
        served = runs["serve_schedule"].result["metrics"]
        assert served[sched.KEY] == [list(e) for e in schedule]
        assert served["num_speculative_tokens"] == sched.needed_k(schedule)
        assert "VLLM_USE_V2_MODEL_RUNNER" not in served["command"]  # the env is not argv
        sweep = runs["sweep"].result["metrics"]
        assert sweep["candidates"]["k5"]["k"] == 5
        # the benchmark: two trials of plain against the schedule, held to the sweep
        bench = runs["benchmark"].result["metrics"]
        assert bench["trials"] == 2 and {r["candidate"] for r in bench["served_table"]} == {
            "schedule"}
        assert [r["concurrency"] for r in bench["against_sweep"]] == [1, 4]
        # P-EAGLE against EAGLE-3 at k=3 and plain, back to back
        peagle = runs["benchmark_peagle"].result["metrics"]
        assert {r["candidate"] for r in peagle["served_table"]} == {"peagle", "k3", "k3_v1"}
        # and vllm bench serve beside ours on the same two servers
        rows = json.loads((work / "reference" / "reference.json").read_text())["rows"]
        assert [(r["concurrency"], r["server"]) for r in rows] == [
            (1, "plain"), (1, "schedule"), (4, "plain"), (4, "schedule")]
        assert all(r["tokens"] == r["vllm_tokens"] for r in rows)
        # a server goes as soon as no stage still to run needs it: k=5 after the sweep,
        # k=3, its V1 twin and P-EAGLE after benchmark_peagle, so the benchmark runs beside
        # plain and the schedule only
        def at(prefix: str) -> int:
            return next(i for i, ln in enumerate(lines) if ln.startswith(prefix))

        def stopped(stage: str) -> int:
            return next(i for i, ln in enumerate(lines) if ln.startswith("[services] ")
                        and f"({stage}) server" in ln
                        and ln.endswith(": terminated (no stage still to run needs it)"))
        assert at("[sweep] r") < stopped("serve_k5") < at("[benchmark_peagle] t")
        for stage in ("serve_k3", "serve_k3_v1", "serve_peagle"):
            assert at("[benchmark_peagle] r") < stopped(stage) < at("[serve_schedule] t")
        assert at("[reference] r") < stopped("serve_baseline")
        for port in ports.values():
            assert wait_gone(port) == []
    finally:
        for port in ports.values():
            kill_fakes(port)
