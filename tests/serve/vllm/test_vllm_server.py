"""The serve command line, port checks, the server's own error line, and stopping groups."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from pipeline.vllm.server import error_line, port_in_use, port_owner, serve_argv, startup_phases
from pipeline.vllm.service import (
    ServiceRecord,
    group_members,
    process_start_time,
    stop_argv,
    stop_group,
)
from tests.sshd import free_port


def test_serve_argv_is_the_documented_command() -> None:
    argv = serve_argv(["vllm"], "/m/verifier", port=8001, draft="/m/drafter",
                      num_speculative_tokens=3, draft_tensor_parallel_size=1,
                      tensor_parallel_size=2, max_model_len=4096,
                      reasoning_parser="qwen3", trust_remote_code=True,
                      extra_args=["--enforce-eager"])
    assert argv[:5] == ["vllm", "serve", "/m/verifier", "--port", "8001"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "eagle3", "model": "/m/drafter", "num_speculative_tokens": 3,
                      "draft_tensor_parallel_size": 1}
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    assert argv[argv.index("--reasoning-parser") + 1] == "qwen3"
    assert "--trust-remote-code" in argv and argv[-1] == "--enforce-eager"
    baseline = serve_argv(["python", "-m", "vllm.entrypoints.cli.main"], "m; rm -rf /",
                          port=8000)
    assert "--speculative-config" not in baseline and baseline[4] == "m; rm -rf /"


VLLM_EAGLE3_REFUSAL = """\
(APIServer pid=61) INFO 08-03 10:00:00 [api_server.py:1805] vLLM API server version 0.10.0
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/site-packages/vllm/engine/arg_utils.py", line 1020, in create_speculative_config
pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
  Value error, Eagle3 is only supported for Llama models. Got self.target_model_config.hf_text_config.model_type='qwen3' [type=value_error, input_value=ArgsKwargs((), {'method':...able_log_stats': False}), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.11/v/value_error
"""

ENGINE_CORE_OOM = """\
(EngineCore_DP0 pid=2109652) ERROR 09-18 12:03:12 [core.py:712] EngineCore failed to start.
(EngineCore_DP0 pid=2109652) ERROR 09-18 12:03:12 [core.py:712] Traceback (most recent call last):
(EngineCore_DP0 pid=2109652) ERROR 09-18 12:03:12 [core.py:712]   File "vllm/v1/engine/core.py", line 703, in run_engine_core
(EngineCore_DP0 pid=2109652) ERROR 09-18 12:03:12 [core.py:712] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
(APIServer pid=2109400) Traceback (most recent call last):
(APIServer pid=2109400) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


@pytest.mark.parametrize("log, expected", [
    (VLLM_EAGLE3_REFUSAL, "Eagle3 is only supported for Llama models. Got "
                          "self.target_model_config.hf_text_config.model_type='qwen3'"),
    (ENGINE_CORE_OOM, "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
    ("INFO starting\nERROR 01-01 [x.py:1] port 8000 taken\nINFO exiting\n",
     "ERROR 01-01 [x.py:1] port 8000 taken"),
    ("just a line\nthe last line\n", "the last line"),
    ("", None),
])
def test_error_line_finds_the_root_cause(log: str, expected: str | None) -> None:
    assert error_line(log.splitlines()) == expected


def test_port_in_use_names_the_listener() -> None:
    port = free_port()
    assert not port_in_use(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert port_in_use(port, "127.0.0.1")
        assert port_in_use(port, "0.0.0.0")
        owner = port_owner(port)
        assert owner is not None and owner.startswith(f"pid {os.getpid()} ")
    assert not port_in_use(port)


def _group_with_child(ignore_term: bool = False) -> subprocess.Popen:
    code = ("import signal, subprocess, sys, time\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else "")
            + "time.sleep(60)'])\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


@pytest.mark.parametrize("ignore_term, outcome", [(False, "terminated"), (True, "killed")])
def test_stop_group_terms_then_kills_the_whole_group(ignore_term: bool, outcome: str) -> None:
    proc = _group_with_child(ignore_term)
    assert len(group_members(proc.pid)) == 2
    assert stop_group(proc.pid, grace=0.5, start_time=process_start_time(proc.pid)) == outcome
    proc.wait(5)
    assert group_members(proc.pid) == []
    assert stop_group(proc.pid, grace=0.5) == "gone"


def test_stop_argv_does_the_same_through_a_shell() -> None:
    proc = _group_with_child(ignore_term=True)
    record = ServiceRecord(url="http://x", pid=proc.pid, pgid=proc.pid,
                           start_time=process_start_time(proc.pid))
    wrong = ServiceRecord(url="http://x", pid=proc.pid, pgid=proc.pid, start_time="1")
    out = subprocess.run(stop_argv(wrong, 0.3), capture_output=True, text=True)
    assert out.stdout.split() == ["not-ours"] and len(group_members(proc.pid)) == 2
    out = subprocess.run(stop_argv(record, 0.3), capture_output=True, text=True)
    assert out.stdout.split() == ["killed"], out.stderr
    proc.wait(5)
    assert group_members(proc.pid) == []


def test_startup_phases_read_from_a_real_vllm_log() -> None:
    # lines of vLLM 0.26.0's log on the H200 (2026-12-02), a drafter's graphs added
    lines = [
        "(EngineCore pid=820) INFO 12-02 15:25:11 [model_runner.py:305] Model loading took "
        "0.06 GiB and 2.374410 seconds",
        "(EngineCore pid=820) INFO 12-02 15:25:33 [monitor.py:53] torch.compile took 21.67 s "
        "in total",
        "(EngineCore pid=820) INFO 12-02 15:25:40 [model_runner.py:747] Graph capturing "
        "finished in 3 secs, took 0.28 GiB",
        "(EngineCore pid=820) INFO 12-02 15:25:41 [model_runner.py:747] Graph capturing "
        "finished in 2 secs, took 0.10 GiB",
        "(EngineCore pid=820) INFO 12-02 15:25:58 [core.py:340] init engine (profile, create "
        "kv cache, warmup model) took 46.64 s (compilation: 21.67 s)",
        "(APIServer pid=692) INFO:     Application startup complete.",
    ]
    assert startup_phases(lines) == {"model_load_s": 2.374, "torch_compile_s": 21.67,
                                     "cuda_graphs_s": 5.0, "engine_init_s": 46.64}
    assert startup_phases(["INFO: nothing here"]) == {}
