"""How a GPU host's CPUs differ for the small steps of a served 32.6M model.

Prints the CPU topology (NUMA nodes, SMT siblings, the GPU's local node), then times a
loop of tiny CUDA launches with a synchronize after each (the shape of one decode step of
a model this small: host work, a launch, a wait) pinned to each CPU in turn, and then
unpinned in short windows, to see whether the host's step cost depends on where the
thread runs. Usage: python scripts/cpu_probe.py [--seconds 0.3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


def topology() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    print(f"allowed CPUs ({len(allowed)}): {allowed}")
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        print(f"{node.name}: cpus {_read(str(node / 'cpulist'))}")
    for cpu in allowed:
        base = f"/sys/devices/system/cpu/cpu{cpu}"
        print(f"cpu{cpu}: siblings {_read(base + '/topology/thread_siblings_list')} "
              f"core {_read(base + '/topology/core_id')} "
              f"package {_read(base + '/topology/physical_package_id')} "
              f"MHz {_read(base + '/cpufreq/scaling_cur_freq')}")
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split()
    except (OSError, subprocess.SubprocessError):
        bus = []
    for b in bus:
        dev = "/sys/bus/pci/devices/" + b.lower()[4:] if len(b) > 12 else b
        print(f"GPU {b}: numa_node {_read(dev + '/numa_node')} "
              f"local_cpulist {_read(dev + '/local_cpulist')}")
    for cmd in (["nvidia-smi", "topo", "-m"], ["lscpu"]):
        try:
            print(subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout)
        except (OSError, subprocess.SubprocessError):
            pass


def _cpu() -> str:
    fields = _read("/proc/thread-self/stat").rsplit(")", 1)[-1].split()
    return fields[36] if len(fields) > 36 else "?"


def launches(seconds: float) -> tuple[float, int]:
    """Median microseconds per launch-and-wait over ``seconds``."""
    import torch
    x = torch.ones(1024, device="cuda")
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        for _ in range(8):
            x.mul_(1.0)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times), len(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=0.3)
    p.add_argument("--windows", type=int, default=20)
    args = p.parse_args()
    topology()
    allowed = sorted(os.sched_getaffinity(0))
    launches(1.0)  # the CUDA context, the first kernels
    for cpu in allowed:
        os.sched_setaffinity(0, {cpu})
        us, n = launches(args.seconds)
        print(f"pinned to cpu{cpu}: {us:.1f} us per 8 launches + sync ({n} loops)", flush=True)
    os.sched_setaffinity(0, set(allowed))
    for w in range(args.windows):
        us, n = launches(args.seconds)
        print(f"unpinned window {w}: {us:.1f} us, last on cpu{_cpu()}", flush=True)
        time.sleep(0.02)  # idle, as a server between requests: the wake-up places it anew


if __name__ == "__main__":
    main()
