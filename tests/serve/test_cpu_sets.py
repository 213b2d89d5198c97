"""CPUs of their own for each server and the client: the plan from a host's topology, the
pins on real processes, and the benchmark that measures inside them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.eagle3.serving.cpu_sets import (
    CLIENT,
    cpu_list,
    isolated,
    parse_cpu_list,
    plan,
)
from pipeline.vllm.service import process_tree
from tests.conftest import ROOT
from tests.serve.helpers import CHAT_PROMPTS
from tests.serve.test_benchmark import SPEC, benchmark, sent

CPUS = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="pinning apart needs two CPUs")


def sysfs(root: Path, siblings: dict[int, str], gpu_cpus: str | None) -> Path:
    """A /sys tree as Linux lays it out: SMT siblings per CPU, and an NVIDIA GPU (class
    3D controller) with the CPUs of its NUMA node."""
    for cpu, text in siblings.items():
        topo = root / f"devices/system/cpu/cpu{cpu}/topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(text + "\n")
    if gpu_cpus is not None:
        dev = root / "bus/pci/devices/0000:19:00.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
        (dev / "local_cpulist").write_text(gpu_cpus + "\n")
    nic = root / "bus/pci/devices/0000:01:00.0"  # another vendor's device: not a GPU
    nic.mkdir(parents=True, exist_ok=True)
    (nic / "vendor").write_text("0x8086\n")
    (nic / "class").write_text("0x020000\n")
    (nic / "local_cpulist").write_text("7\n")
    return root


# 16 CPUs, two SMT threads a core (cpu i and i+8 share core i), two NUMA nodes of 4 cores
SMT16 = {cpu: f"{cpu % 8},{cpu % 8 + 8}" for cpu in range(16)}


def test_cpu_lists_round_trip() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert cpu_list([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert cpu_list([5]) == "5"


def test_blocks_are_whole_cores_from_the_gpus_node(tmp_path: Path) -> None:
    root = sysfs(tmp_path, SMT16, gpu_cpus="0-3,8-11")
    placed = plan(["baseline", "schedule", CLIENT], range(16), root)
    # the GPU's node holds 4 cores: one each, the siblings together, the fourth left over
    assert placed.groups == {"baseline": (0, 8), "schedule": (1, 9), CLIENT: (2, 10)}
    assert "GPU's NUMA node (0-3,8-11 of 0-15)" in placed.source
    assert placed.why_not is None


def test_a_node_too_small_gives_way_to_every_cpu(tmp_path: Path) -> None:
    root = sysfs(tmp_path, SMT16, gpu_cpus="0-1,8-9")  # two cores for three blocks
    placed = plan(["baseline", "schedule", CLIENT], range(16), root)
    assert placed.groups == {"baseline": (0, 1, 8, 9), "schedule": (2, 3, 10, 11),
                             CLIENT: (4, 5, 12, 13)}
    assert placed.source.startswith("this process's CPUs")


def test_without_topology_each_cpu_is_a_core(tmp_path: Path) -> None:
    placed = plan(["a", CLIENT], [0, 1, 2, 3, 4], tmp_path)  # an empty /sys
    assert placed.groups == {"a": (0, 1), CLIENT: (2, 3)}


def test_too_few_cores_pins_nothing_and_says_why(tmp_path: Path) -> None:
    placed = plan(["baseline", "schedule", CLIENT], [0, 8], sysfs(tmp_path, SMT16, None))
    assert placed.groups == {}
    assert placed.why_not == "1 physical core(s) for 3 blocks"
    assert "not isolated (1 physical core(s) for 3 blocks)" in placed.describe()


def _allowed(pid: int) -> dict[int, str]:
    """Each thread of ``pid``: the CPUs it may run on, as /proc shows them."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out[int(task.name)] = line.split(":", 1)[1].strip()
    return out


@needs_two
def test_a_servers_whole_tree_is_pinned_and_then_given_back(fake_server) -> None:
    url, _ = fake_server("--fake-engine-child")
    port = int(url.rsplit(":", 1)[1])
    from pipeline.vllm.server import listener_pid
    root = listener_pid(port)
    assert root is not None
    deadline = time.monotonic() + 10
    while len(tree := process_tree(root)) < 2:  # the engine child starts with the server
        assert time.monotonic() < deadline, "the fake engine child never started"
        time.sleep(0.05)
    everything = cpu_list(CPUS)
    with isolated({"baseline": url}) as placed:
        assert placed.why_not is None, placed.describe()
        mine, theirs = cpu_list(placed.groups[CLIENT]), cpu_list(placed.groups["baseline"])
        assert set(placed.groups[CLIENT]).isdisjoint(placed.groups["baseline"])
        for pid in tree:
            assert set(_allowed(pid).values()) == {theirs}, pid
        assert set(_allowed(os.getpid()).values()) == {mine}
        assert placed.threads["baseline"] >= 2 and placed.threads[CLIENT] >= 1
    for pid in [*tree, os.getpid()]:
        assert set(_allowed(pid).values()) == {everything}, pid


@needs_two
def test_a_server_elsewhere_is_left_alone_and_named() -> None:
    with isolated({"remote": "http://10.1.2.3:8000", "gone": "http://127.0.0.1:9"}) as placed:
        assert placed.skipped["remote"] == "10.1.2.3 is another host"
        assert placed.skipped["gone"] == "no process of ours listens on port 9"
        line = placed.describe()
    assert "not pinned: remote (10.1.2.3 is another host)" in line


def test_off_pins_nothing() -> None:
    with isolated({"a": "http://127.0.0.1:9"}, enabled=False) as placed:
        assert placed.groups == {} and placed.why_not == "isolate_cpus is off"
        assert set(_allowed(os.getpid()).values()) == {cpu_list(CPUS)}


@needs_two
def test_the_benchmark_measures_inside_the_blocks(tmp_path: Path, fake_server) -> None:
    # one server and the client: two blocks, which two CPUs hold
    spec_url, spec_record = fake_server("--fake-engine-child", spec=SPEC)
    code, doc, log = benchmark(tmp_path, "--url", spec_url, "--prompts", CHAT_PROMPTS,
                               "--concurrency", "[1, 2]", "--requests", "4",
                               "--isolate-cpus")
    assert code == 0, log
    iso = doc["metrics"]["cpu_isolation"]
    assert iso["why_not"] is None and iso["skipped"] == {}, iso
    assert iso["threads"]["spec"] >= 2 and iso["threads"][CLIENT] >= 1
    assert f"CPUs: spec {iso['cpus']['spec']} (" in log
    assert not set(parse_cpu_list(iso["cpus"]["spec"])) & set(
        parse_cpu_list(iso["cpus"][CLIENT]))
    asked = [r for r in sent(spec_record) if r["path"].startswith("/v1/")]
    assert len(asked) >= 10  # warm-up and both levels
    assert {cpu_list(r["cpus"]) for r in asked} == {iso["cpus"]["spec"]}
    # and given back: a request after the benchmark runs anywhere again
    from pipeline.vllm.openai_client import post_json
    post_json(f"{spec_url}/v1/completions", {"model": "tiny", "prompt": "hi",
                                             "max_tokens": 2}, timeout=10)
    assert sent(spec_record)[-1]["cpus"] == CPUS


@needs_two
def test_without_a_core_a_block_the_benchmark_runs_unpinned_and_says_so(
        tmp_path: Path, fake_server) -> None:
    base_url, base_record = fake_server()
    spec_url, _ = fake_server(spec=SPEC)
    result = tmp_path / "result.json"
    two = set(CPUS[:2])
    # the benchmark limited to two CPUs: three blocks (two servers, the client) do not fit
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.eagle3.benchmark", "--url", spec_url,
         "--baseline-url", base_url, "--prompts", CHAT_PROMPTS, "--concurrency", "[1]",
         "--requests", "2", "--trials", "1", "--min-seconds", "0", "--isolate-cpus",
         "--result", str(result)],
        capture_output=True, text=True, cwd=ROOT, timeout=240,
        preexec_fn=lambda: os.sched_setaffinity(0, two),
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    iso = json.loads(result.read_text())["metrics"]["cpu_isolation"]
    assert re.fullmatch(r"[12] physical core\(s\) for 3 blocks", iso["why_not"]), iso
    assert f"CPUs: not isolated ({iso['why_not']})" in proc.stdout
    assert {cpu_list(r["cpus"]) for r in sent(base_record)} == {cpu_list(CPUS)}
