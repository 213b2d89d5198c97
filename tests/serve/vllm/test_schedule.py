"""vLLM's dynamic speculation schedule: its rules, which schedules the engine starts (held
against vLLM's own capture code where a vLLM is at hand), the choice from a sweep, the
file, ``eagle3.serve`` passing it (with ``kv_cache_memory_bytes``) to the server it starts,
and the fallback to the sweep's best fixed k when the server dies in its capture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.vllm import schedule as sched
from pipeline.vllm.openai_client import get
from pipeline.vllm.server import byte_size
from pipeline.vllm.service import group_members, stop_group
from tests.conftest import ROOT
from tests.serve.helpers import FAKE_COMMAND, kill_fakes, make_models, wait_gone
from tests.sshd import free_port


@pytest.mark.parametrize("value, words", [
    ([], "must be a non-empty list of [start, end, k] entries"),
    ([[1, 8]], "entry 0 must be three integers [start, end, k]"),
    ([[1, 8, 3.5]], "entry 0 must be three integers"),
    ([[0, 8, 3]], "entry 0: batch sizes start at 1"),
    ([[1, 8, 3], [9, 4, 1]], "entry 1: start 9 is after end 4"),
    ([[1, 8, -1]], "entry 0: k must be >= 0 (0 turns speculation off)"),
    ([[1, 8, 3], [8, 64, 1]], "the range starting at 8 overlaps the one before it"),
    ([[2, 8, 3]], "the first range must start at batch size 1"),
])
def test_a_schedule_vllm_would_refuse_is_refused_here(value, words) -> None:
    with pytest.raises(sched.ScheduleError, match=r".*") as err:
        sched.check(value)
    assert words in str(err.value)


def test_ranges_gaps_and_the_k_to_serve_with() -> None:
    schedule = sched.check([[9, 32, 2], [1, 4, 3], [65, 128, 0]])  # sorted for vLLM
    assert schedule == [(1, 4, 3), (9, 32, 2), (65, 128, 0)]
    # a gap takes the range before it; past the last range, the last k
    assert [sched.k_at(schedule, b) for b in (1, 4, 5, 9, 40, 65, 500)] == [3, 3, 3, 2, 2, 0,
                                                                           0]
    assert sched.needed_k(schedule) == 3 and sched.needed_k([(1, 8, 0)]) == 1


def test_a_sweep_chooses_the_fastest_k_per_level_and_zero_where_none_wins() -> None:
    speedups = {1: {"k1": 1.5, "k2": 1.7, "k3": 1.8, "k5": 1.75},
                4: {"k1": 1.4, "k2": 1.6, "k3": 1.55, "k5": 1.3},
                16: {"k1": 1.1, "k2": 1.05, "k3": 0.98, "k5": 0.9},
                64: {"k1": 0.97, "k2": 0.93, "k3": 0.9, "k5": None}}
    ks = {"k1": 1, "k2": 2, "k3": 3, "k5": 5}
    schedule, choices = sched.from_sweep(speedups, ks, graphs=sched.PIECEWISE)
    # boundaries at the geometric midpoints: 2, 8, 32
    assert schedule == [(1, 2, 3), (3, 8, 2), (9, 32, 1), (33, 1024, 0)]
    assert [(c.concurrency, c.k, c.candidate) for c in choices] == [
        (1, 3, "k3"), (4, 2, "k2"), (16, 1, "k1"), (64, 0, "k1")]
    assert choices[3].by_k == {1: 0.97, 2: 0.93, 3: 0.9}
    # a margin asks more than a tie; equal neighbours merge
    merged, _ = sched.from_sweep({1: {"k3": 1.8}, 4: {"k3": 1.6}, 16: {"k3": 1.04}}, ks,
                                 margin=0.05, graphs=sched.PIECEWISE)
    assert merged == [(1, 8, 3), (9, 1024, 0)]


# (schedule, num_speculative_tokens, starts with full graphs): vLLM 0.26.0's capture, as its
# own code computes it (test_the_rule_is_vllms_own below)
RULE_CASES = [
    ([[1, 2, 5], [3, 32, 3], [33, 1024, 5]], 5, False),  # the sweep of 2026-12-06
    ([[1, 32, 5], [33, 1024, 3]], 5, False),               # k falling with the batch
    ([[1, 8, 3], [9, 64, 1], [65, 1024, 0]], 3, False),    # ranges of 0
    ([[1, 32, 5], [33, 1024, 4]], 5, False),               # k = K - 1: division by zero
    ([[1, 8, 1], [9, 1024, 0]], 1, False),
    ([[1, 1024, 3]], 3, True),
    ([[1, 1024, 1]], 1, True),
    ([[1, 8, 3], [9, 1024, 6]], 3, True),                  # k above K is capped
    ([[1, 8, 3], [9, 1024, 6]], 6, False),                 # ... unless K is the largest k
]


@pytest.mark.parametrize("value, k, starts", RULE_CASES)
def test_with_full_cuda_graphs_only_one_k_starts(value, k, starts) -> None:
    schedule = sched.check(value)
    problem = sched.capture_problem(schedule, k)
    assert (problem is None) is starts
    if problem:
        assert "below num_speculative_tokens" in problem and "vLLM issue 48494" in problem
    # piecewise graphs (or eager, or the V1 runner) capture no decode step in full
    assert sched.capture_problem(schedule, k, sched.PIECEWISE) is None


@pytest.mark.parametrize("extra, env, graphs", [
    ([], {}, "full"),
    (["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'], {}, "piecewise"),
    (['--compilation-config={"cudagraph_mode":"NONE"}'], {}, "piecewise"),
    (["--compilation-config", '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'], {}, "full"),
    (["--enforce-eager"], {}, "piecewise"),
    ([], {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "piecewise"),
    ([], {"VLLM_USE_V2_MODEL_RUNNER": "1"}, "full"),
])
def test_which_graphs_a_serve_command_line_asks_for(extra, env, graphs) -> None:
    assert sched.graphs_of(extra, env) == graphs


def test_with_full_graphs_the_sweep_serves_the_one_k_best_over_every_level() -> None:
    """The sweep of 2026-12-06: k=5 fastest at 1 and 64, k=3 at 4 and 16. vLLM starts no
    schedule with two ks, so the sweep writes the one best over the levels together (the
    geometric mean of its speedups) and names the levels that gave up their fastest k."""
    speedups = {1: {"k2": 1.45, "k3": 1.55, "k5": 1.62},
                4: {"k2": 1.30, "k3": 1.50, "k5": 1.40},
                16: {"k2": 1.25, "k3": 1.45, "k5": 1.38},
                64: {"k2": 1.10, "k3": 1.20, "k5": 1.22}}
    ks = {"k2": 2, "k3": 3, "k5": 5}
    assert sched.from_sweep(speedups, ks, graphs=sched.PIECEWISE)[0] == [
        (1, 2, 5), (3, 32, 3), (33, 1024, 5)]  # what vLLM 0.26 cannot start
    schedule, choices = sched.from_sweep(speedups, ks)
    assert schedule == [(1, 1024, 3)] and sched.capture_problem(schedule) is None
    assert sched.best_fixed(speedups, ks) == 3
    gave = {c.concurrency: (c.best_k, c.k, c.speedup) for c in choices if c.best_k}
    assert gave == {1: (5, 3, 1.55), 64: (5, 3, 1.2)}
    assert choices[0].to_json()["gave_up"] == {"k": 5, "speedup": 1.62}
    # where no k beats plain the one k is served all the same (vLLM cannot turn it off)
    schedule, choices = sched.from_sweep({1: {"k3": 0.9}, 4: {"k3": 0.8}}, {"k3": 3})
    assert schedule == [(1, 1024, 3)] and choices[0].k == 3


def test_the_schedule_file_is_read_back_from_json_a_list_or_a_sweep(tmp_path: Path) -> None:
    schedule, choices = sched.from_sweep({1: {"k3": 1.8}, 16: {"k1": 1.2}},
                                         {"k3": 3, "k1": 1}, graphs=sched.PIECEWISE)
    sched.write(tmp_path / "s.json", schedule, choices, {"trials": 1, "best_fixed_k": 3})
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["num_speculative_tokens"] == 3 and doc["trials"] == 1
    assert doc["levels"][0] == {"concurrency": 1, "k": 3, "candidate": "k3", "speedup": 1.8,
                                "by_k": {"3": 1.8}, "gave_up": None}
    assert sched.fallback_k("s.json", tmp_path) == 3
    assert sched.fallback_k("[[1, 4, 2]]") is None
    assert sched.load("s.json", tmp_path) == schedule
    (tmp_path / "list.json").write_text("[[1, 4, 2]]")
    assert sched.load(str(tmp_path / "list.json")) == [(1, 4, 2)]
    assert sched.load("[[1, 4, 2], [5, 9, 0]]") == [(1, 4, 2), (5, 9, 0)]
    for text, words in (("nope.json", "cannot read the schedule file"),
                        ("[[1, 2", "not valid JSON"), ("[[3, 4, 1]]", "must start at batch size 1")):
        with pytest.raises(sched.ScheduleError) as err:
            sched.load(text, tmp_path)
        assert words in str(err.value)
    (tmp_path / "other.json").write_text('{"x": 1}')
    with pytest.raises(sched.ScheduleError, match="has no 'num_speculative_tokens_per_batch_"):
        sched.load("other.json", tmp_path)


def test_sizes_are_read_as_vllm_reads_them() -> None:
    assert byte_size("2147483648") == 2 * 2**30 == byte_size("2G")
    assert byte_size("1.5g") == 1_500_000_000 and byte_size("512M") == 512 * 2**20
    for bad in ("two", "1.5", "0", "-3G"):
        with pytest.raises(Exception, match="size"):
            byte_size(bad)


def serve(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    result = tmp_path / "serve-result.json"
    proc = subprocess.run([sys.executable, "-m", "pipeline.eagle3.serve", *args,
                           "--command", json.dumps(FAKE_COMMAND), "--health-timeout", "30",
                           "--stop-grace", "3", "--result", str(result)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    doc = json.loads(result.read_text()) if result.exists() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


def test_serve_passes_the_sweeps_schedule_and_the_kv_cache_size(tmp_path: Path) -> None:
    target, draft = make_models(tmp_path / "models")
    schedule, choices = sched.from_sweep({1: {"k3": 1.8}, 4: {"k2": 1.5}, 16: {"k1": 0.9}},
                                         {"k3": 3, "k2": 2, "k1": 1}, graphs=sched.PIECEWISE)
    sched.write(tmp_path / "schedule.json", schedule, choices)
    port = free_port()
    try:
        code, doc, out = serve(tmp_path, "--target", str(target), "--draft", str(draft),
                               "--port", str(port), "--num-speculative-tokens-per-batch-size",
                               "schedule.json", "--kv-cache-memory-bytes", "2G",
                               "--extra-args", '["--fake-v1-runner"]')
        assert code == 0, out
        m = doc["metrics"]
        argv = m["command"]
        config = json.loads(argv.split("--speculative-config ")[1].split(" ")[0].strip("'"))
        assert config == {"method": "eagle3", "model": str(draft),
                          "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1,
                          sched.KEY: [[1, 2, 3], [3, 8, 2], [9, 1024, 0]]}
        assert "--kv-cache-memory-bytes 2147483648" in argv
        assert m["num_speculative_tokens"] == 3 and m[sched.KEY] == config[sched.KEY]
        # the server parsed both (its log, streamed by the action)
        assert f"'{sched.KEY}': [[1, 2, 3], [3, 8, 2], [9, 1024, 0]]" in out
        assert "kv_cache_memory_bytes=2147483648" in out
        # what vLLM's log says about CUDA graphs is kept with the figures
        assert m["server_notes"] == ["vLLM switched cudagraph_mode from FULL_AND_PIECEWISE "
                                     "to PIECEWISE for the speculation schedule (the V1 "
                                     "model runner)"]
        assert "schedule [[1, 2, 3], [3, 8, 2], [9, 1024, 0]] (k up to 3)" in doc["summary"]
    finally:
        kill_fakes(port)


@pytest.mark.parametrize("args, words", [
    (["--num-speculative-tokens-per-batch-size", "[[1, 8, 3], [4, 64, 1]]"],
     "num_speculative_tokens_per_batch_size: the range starting at 4 overlaps"),
    (["--num-speculative-tokens-per-batch-size", "[[1, 8, 3]]", "--num-speculative-tokens",
      "2"], "num_speculative_tokens 2 is below the schedule's largest k 3"),
    (["--num-speculative-tokens-per-batch-size", "missing.json"],
     "cannot read the schedule file"),
    (["--num-speculative-tokens-per-batch-size", "[[1, 8, 3]]", "--no-speculative"],
     "a speculation schedule needs `speculative: true`"),
    (["--kv-cache-memory-bytes", "lots"], "not a size in bytes: 'lots'"),
])
def test_a_bad_schedule_fails_before_anything_starts(tmp_path: Path, args: list[str],
                                                     words: str) -> None:
    target, draft = make_models(tmp_path / "models")
    port = free_port()
    code, doc, out = serve(tmp_path, "--target", str(target), "--draft", str(draft),
                           "--port", str(port), *args)
    assert code != 0 and "Traceback" not in out
    assert words in (doc.get("error") or out), out
    assert "starting:" not in out and wait_gone(port, 1) == []


def test_a_server_started_without_waiting_is_waited_for_by_the_ready_module(
        tmp_path: Path) -> None:
    target, draft = make_models(tmp_path / "models")
    good, bad = free_port(), free_port()
    started = []
    try:
        for port, extra in ((good, ["--fake-startup-s", "1.5"]),
                            (bad, ["--fake-die-after", "2", "--fake-die-message",
                                   "RuntimeError: CUDA error: out of memory"])):
            (tmp_path / str(port)).mkdir()
            code, doc, out = serve(tmp_path / str(port), "--target", str(target), "--draft",
                                   str(draft), "--port", str(port), "--no-wait",
                                   "--extra-args", json.dumps(extra))
            assert code == 0, out
            svc = doc["metrics"]["service"]
            assert svc["ready"] is False and svc["health_timeout"] == 30
            assert doc["metrics"]["waited"] is False and "model" not in doc["metrics"]
            assert "not waited for: the first stage that needs it waits up to 30s" in \
                doc["summary"]
            started.append(svc)
        requests = [{"name": f"s{i}", "url": s["url"], "pid": s["pid"], "pgid": s["pgid"],
                     "start_time": s["start_time"], "log": s["log"],
                     "started_at": s["started_at"], "deadline": s["started_at"] + 30,
                     "health_timeout": 30, "stop_grace": 2} for i, s in enumerate(started)]
        proc = subprocess.run([sys.executable, "-m", "pipeline.vllm.ready",
                               json.dumps(requests)], capture_output=True, text=True,
                              timeout=90, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
        answers = {a["name"]: a for a in map(json.loads, proc.stdout.splitlines())}
        assert answers["s0"]["ready"] is True and answers["s0"]["model"] == str(target)
        assert answers["s0"]["startup_s"] >= 1.5
        assert answers["s1"]["ready"] is False and answers["s1"]["stopped"] in (
            "gone", "terminated", "killed")
        assert answers["s1"]["error"] == ("the server exited during start: RuntimeError: "
                                          "CUDA error: out of memory")
        assert get(f"{started[0]['url']}/health").ok
        assert group_members(started[1]["pgid"]) == []
    finally:
        for s in started:
            stop_group(s["pgid"], 3, s["start_time"])
        for port in (good, bad):
            kill_fakes(port)


VLLM_SIDE = '''
import json, runpy, sys
side = runpy.run_path(sys.argv[1])
argv = json.loads(sys.argv[2])
args = side["_parse_serve"](argv)
from vllm.v1.spec_decode.dynamic.utils import (build_dynamic_sd_schedule_lookup,
                                               validate_and_normalize_dynamic_sd_schedule)
spec = args["speculative_config"]
table = spec["num_speculative_tokens_per_batch_size"]
print(json.dumps({"speculative_config": spec,
                  "normalized": validate_and_normalize_dynamic_sd_schedule(table),
                  "lookup": build_dynamic_sd_schedule_lookup(
                      table, vllm_max_batch_size=128,
                      vllm_num_speculative_tokens=spec["num_speculative_tokens"])}))
'''


@pytest.mark.vllm
def test_vllms_own_parser_and_scheduler_take_the_schedule(tmp_path: Path) -> None:
    """The command line eagle3.serve builds, through vLLM's CLI parser, and its schedule
    through the functions vLLM's scheduler expands it with: the k per batch size is the one
    :func:`sched.k_at` says."""
    from tests.verify.test_real_vllm import SIDE, _vllm_python

    python = _vllm_python()
    if python is None:
        pytest.skip("no real vLLM: set HARNESS_VLLM_PYTHON to the python of a venv with "
                    "vLLM installed (docs/verify.md)")
    from pipeline.vllm.server import serve_argv

    schedule, _ = sched.from_sweep({1: {"k3": 1.8}, 4: {"k2": 1.5}, 16: {"k1": 1.1},
                                    64: {"k1": 0.95}}, {"k3": 3, "k2": 2, "k1": 1},
                                   graphs=sched.PIECEWISE)
    argv = serve_argv(["vllm"], str(tmp_path), port=8005, draft=str(tmp_path / "d"),
                      num_speculative_tokens=sched.needed_k(schedule),
                      kv_cache_memory_bytes=2 * 2**30,
                      speculative_config={sched.KEY: [list(e) for e in schedule]})
    proc = subprocess.run([python, "-c", VLLM_SIDE, str(SIDE), json.dumps(argv)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["speculative_config"] == json.loads(argv[argv.index(
        "--speculative-config") + 1])
    assert [tuple(e) for e in answer["normalized"]] == schedule
    assert answer["lookup"][1:] == [sched.k_at(schedule, b) for b in range(1, 129)]


def test_a_schedule_that_dies_in_capture_falls_back_to_the_sweeps_best_fixed_k(
        tmp_path: Path) -> None:
    """The stand-in dies in its CUDA-graph capture with vLLM 0.26.0's traceback whenever it
    is given a schedule. The serve stage waits for a schedule's server even when told not
    to, sees the capture failure, and starts the sweep's best fixed k on the same port;
    the result, the summary and the full commands say so."""
    target, draft = make_models(tmp_path / "models")
    rising = sched.check([[1, 2, 5], [3, 32, 3], [33, 1024, 5]])
    sched.write(tmp_path / "schedule.json", rising, [], {"best_fixed_k": 3})
    port = free_port()
    try:
        code, doc, out = serve(tmp_path, "--target", str(target), "--draft", str(draft),
                               "--port", str(port), "--num-speculative-tokens-per-batch-size",
                               "schedule.json", "--no-wait", "--extra-args",
                               '["--fake-die-in-capture"]')
        assert code == 0, out
        m = doc["metrics"]
        assert "note: k=3 at batch sizes 3-32 is below num_speculative_tokens 5" in out
        assert "a server with a speculation schedule is waited for" in out
        assert m["fallback"]["k"] == 3 and m["fallback"]["schedule"] == [list(e) for e in
                                                                          rising]
        assert ("died in CUDA-graph capture: AssertionError: assert 0 < num_reqs <= "
                "num_tokens") in m["fallback"]["why"]
        assert sched.KEY in m["fallback"]["failed_command"]
        assert sched.KEY not in m and sched.KEY not in m["command"]
        assert m["num_speculative_tokens"] == 3 and m["waited"] is True
        assert '"num_speculative_tokens":3' in m["command"]
        assert doc["summary"].startswith("FALLBACK: the schedule [[1, 2, 5], [3, 32, 3], "
                                         "[33, 1024, 5]] died in CUDA-graph capture")
        assert "EAGLE-3, k=3" in doc["summary"]
        assert get(f"http://127.0.0.1:{port}/health").ok
    finally:
        kill_fakes(port)
    # an inline schedule knows no best fixed k: the stage fails, saying so, and leaves
    # nothing running
    port = free_port()
    code, doc, out = serve(tmp_path, "--target", str(target), "--draft", str(draft),
                           "--port", str(port), "--num-speculative-tokens-per-batch-size",
                           "[[1, 8, 3], [9, 1024, 1]]", "--extra-args",
                           '["--fake-die-in-capture"]')
    assert code == 1 and "Traceback (most recent call last)" not in doc.get("error", "")
    assert "no fallback_k is known" in doc["error"] and "FALLBACK" not in out
    assert wait_gone(port, 1) == []


CAPTURE_SIDE = '''
import json, sys, types
import torch
from vllm.config import VllmConfig
from vllm.config.compilation import CompilationConfig, CUDAGraphMode
from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

SEQS, TOKENS = 1024, 8192
out = []
for schedule, k in json.loads(sys.argv[1]):
    spec = types.SimpleNamespace(num_speculative_tokens=k,
                                 num_speculative_tokens_per_batch_size=schedule)
    spec.uses_dynamic_speculative_decoding = lambda: True
    cc = CompilationConfig()
    cc.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cfg = types.SimpleNamespace(
        speculative_config=spec, num_speculative_tokens=k, compilation_config=cc,
        model_config=types.SimpleNamespace(enforce_eager=False),
        scheduler_config=types.SimpleNamespace(max_num_seqs=SEQS,
                                               max_num_batched_tokens=TOKENS),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=1),
        performance_mode="balanced")
    VllmConfig._set_cudagraph_sizes(cfg)  # vLLM's own capture sizes
    buffers = InputBuffers(SEQS, TOKENS, torch.device("cpu"))
    ok = True
    # the target, the drafter's first pass and (K > 1) its one-token decode steps, as the
    # V2 model runner and its speculator build their graph managers
    decode = (CUDAGraphMode.FULL_DECODE_ONLY if cc.cudagraph_mode.decode_mode()
              == CUDAGraphMode.FULL else CUDAGraphMode.NONE)
    for mode, query in ((cc.cudagraph_mode, k + 1), (cc.cudagraph_mode, k + 1), (decode, 1)):
        m = CudaGraphManager.__new__(CudaGraphManager)
        m.vllm_config, m.compilation_config, m.max_num_reqs = cfg, cc, SEQS
        m.cudagraph_mode, m.decode_query_len, m.lora_capture_cases = mode, query, [0]
        m.use_breakable_cg, m._candidates, m._capture_descs = False, {}, {}
        try:
            m._init_candidates()
        except ZeroDivisionError:
            ok = False
            continue
        if query == 1 and k == 1:
            continue  # built, never captured
        for descs in m._capture_descs.values():
            for d in descs:
                try:
                    InputBatch.make_dummy(d.num_reqs or min(d.num_tokens, SEQS),
                                          d.num_tokens, buffers)
                except AssertionError:
                    ok = False
    out.append(ok)
print(json.dumps(out))
'''


@pytest.mark.vllm
def test_the_rule_is_vllms_own() -> None:
    """Every case of RULE_CASES through vLLM's own capture-size and graph-candidate code
    and the function that asserts in the H200's crash (``InputBatch.make_dummy``), on the
    CPU: a schedule starts exactly when :func:`sched.capture_problem` says it does."""
    from tests.verify.test_real_vllm import _vllm_python

    python = _vllm_python()
    if python is None:
        pytest.skip("no real vLLM: set HARNESS_VLLM_PYTHON to the python of a venv with "
                    "vLLM installed (docs/verify.md)")
    cases = [[value, k] for value, k, _starts in RULE_CASES]
    proc = subprocess.run([python, "-c", CAPTURE_SIDE, json.dumps(cases)],
                          capture_output=True, text=True, timeout=600,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    starts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert starts == [starts for _v, _k, starts in RULE_CASES]
    assert starts == [sched.capture_problem(sched.check(v), k) is None for v, k, _s in
                      RULE_CASES]
