"""CPUs of their own for each server and for the benchmark's client, while it measures.

At a verifier as small as the GPU example's (32.6M parameters), a decode step is almost all
host work: vLLM's scheduler, the launch of a CUDA graph, the wait. The served speed then
depends on where the kernel's scheduler puts those threads. On the H200 plain decoding at
one request at a time switched between two speeds, 2.2 and 1.6 ms a token, at request
boundaries, every 1-2 s: where the engine's thread woke up. A speedup measured over runs of
a few seconds then moves 10-25% from one run to the next (docs/PERFORMANCE.md, "Served
evidence that reaches a decision").

:func:`plan` deals this host's CPUs out in whole physical cores (SMT siblings together),
one block per server and one for the client, drawn from the GPU's own NUMA node where it
has enough of them. :func:`isolated` pins every thread of each server's process tree (the
API server that listens on the URL's port, its EngineCore and workers) and of this process
to its block, and puts the old masks back afterwards. Linux only; elsewhere, or for a
server on another host, nothing is pinned and the result says why. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.vllm.server import listener_pid
from pipeline.vllm.service import process_tree

__all__ = ["CLIENT", "Placement", "cpu_list", "isolated", "parse_cpu_list", "plan"]

CLIENT = "client"
_LOCAL = {"127.0.0.1", "localhost", "::1", "0.0.0.0", ""}
_NVIDIA = "0x10de"


def parse_cpu_list(text: str) -> list[int]:
    """Linux's list syntax (``0-3,8,10-11``) to CPU numbers."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_list(cpus: Iterable[int]) -> str:
    """CPU numbers in Linux's list syntax, runs joined: ``0-3,8``."""
    xs = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        runs.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(runs)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def physical_cores(cpus: Iterable[int], sys_root: Path = Path("/sys")) -> list[tuple[int, ...]]:
    """``cpus`` grouped by physical core (SMT siblings together), in the order of each
    core's first CPU. A CPU whose siblings are not readable is a core of its own."""
    wanted = set(cpus)
    cores: dict[tuple[int, ...], None] = {}
    for cpu in sorted(wanted):
        text = _read(sys_root / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            siblings = tuple(c for c in parse_cpu_list(text) if c in wanted) if text else ()
        except ValueError:
            siblings = ()
        cores.setdefault(siblings or (cpu,), None)
    return sorted(cores, key=lambda core: core[0])


def gpu_local_cpus(sys_root: Path = Path("/sys")) -> set[int] | None:
    """The CPUs of the NUMA nodes the host's NVIDIA GPUs hang off (their union), or None
    when sysfs does not say."""
    found: set[int] = set()
    for dev in (sys_root / "bus/pci/devices").glob("*"):
        if _read(dev / "vendor") != _NVIDIA or not (_read(dev / "class") or "").startswith(
                ("0x0300", "0x0302")):
            continue
        text = _read(dev / "local_cpulist")
        try:
            found.update(parse_cpu_list(text) if text else [])
        except ValueError:
            continue
    return found or None


@dataclass
class Placement:
    """Which CPUs each server (by role) and the client got, or why none were given."""

    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    source: str = ""            # what the blocks were cut from
    skipped: dict[str, str] = field(default_factory=dict)  # role -> why it was not pinned
    threads: dict[str, int] = field(default_factory=dict)  # role -> threads pinned
    why_not: str | None = None  # nothing was pinned, and why

    def to_json(self) -> dict[str, object]:
        return {"cpus": {k: cpu_list(v) for k, v in self.groups.items()},
                "from": self.source, "threads": dict(self.threads),
                "skipped": dict(self.skipped), "why_not": self.why_not}

    def describe(self) -> str:
        if self.why_not:
            return f"CPUs: not isolated ({self.why_not})"
        parts = [f"{role} {cpu_list(cpus)}"
                 + (f" ({self.threads[role]} threads)" if role in self.threads else "")
                 for role, cpus in self.groups.items()]
        line = f"CPUs: {', '.join(parts)}; cut from {self.source}"
        if self.skipped:
            line += "; not pinned: " + ", ".join(f"{r} ({w})" for r, w in self.skipped.items())
        return line


def plan(names: Sequence[str], allowed: Iterable[int], sys_root: Path = Path("/sys")
         ) -> Placement:
    """One block of whole cores per name, as many cores each as the pool allows, from the
    GPU's NUMA node when it holds a core per name, else from every allowed CPU."""
    allowed = set(allowed)
    local = gpu_local_cpus(sys_root)
    pool, source = allowed, f"this process's CPUs ({cpu_list(allowed)})"
    if local is not None and local & allowed and local & allowed != allowed and \
            len(physical_cores(local & allowed, sys_root)) >= len(names):
        pool = local & allowed
        source = f"the GPU's NUMA node ({cpu_list(pool)} of {cpu_list(allowed)})"
    cores = physical_cores(pool, sys_root)
    per = len(cores) // max(1, len(names))
    if per == 0:
        return Placement(source=source, why_not=f"{len(cores)} physical core(s) for "
                                                f"{len(names)} blocks")
    groups = {name: tuple(sorted(cpu for core in cores[i * per:(i + 1) * per] for cpu in core))
              for i, name in enumerate(names)}
    return Placement(groups=groups, source=source)


def _threads(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []  # gone since the scan


class _Pins:
    """Every thread pinned, with the mask it had; a thread started since (it inherited
    the pinned mask) gets its process's old mask back."""

    def __init__(self, fallback: set[int]):
        self.fallback = fallback
        self.before: dict[int, set[int]] = {}  # tid -> its mask before
        self.processes: set[int] = set()

    def pin(self, pids: Iterable[int], cpus: set[int]) -> int:
        pinned = 0
        for pid in pids:
            self.processes.add(pid)
            for tid in _threads(pid):
                try:
                    before = os.sched_getaffinity(tid)
                    os.sched_setaffinity(tid, cpus)
                except OSError:  # gone, or not ours
                    continue
                self.before.setdefault(tid, before)
                pinned += 1
        return pinned

    def restore(self) -> None:
        for pid in self.processes:
            own = self.before.get(pid, self.fallback)
            for tid in _threads(pid):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, self.before.get(tid, own))


def _server_root(url: str) -> tuple[int | None, str | None]:
    parts = urlsplit(url)
    if (parts.hostname or "") not in _LOCAL:
        return None, f"{parts.hostname} is another host"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    pid = listener_pid(port)
    if pid is None:
        return None, f"no process of ours listens on port {port}"
    return pid, None


@contextlib.contextmanager
def isolated(servers: Mapping[str, str], *, enabled: bool = True,
             sys_root: Path = Path("/sys")) -> Iterator[Placement]:
    """While inside: each server (role -> URL) on its own block of cores, this process on
    another (:data:`CLIENT`); afterwards every pinned thread gets its old mask back."""
    if not enabled:
        yield Placement(why_not="isolate_cpus is off")
        return
    if not hasattr(os, "sched_setaffinity") or not Path("/proc/self/task").is_dir():
        yield Placement(why_not="this host has no sched_setaffinity or /proc")
        return
    roots: dict[str, int] = {}
    skipped: dict[str, str] = {}
    for role, url in servers.items():
        root, why = _server_root(url)
        if root is None:
            skipped[role] = why or "not found"
        else:
            roots[role] = root
    allowed = os.sched_getaffinity(0)
    placement = plan([*roots, CLIENT], allowed, sys_root)
    placement.skipped = skipped
    pins = _Pins(allowed)
    try:
        if placement.why_not is None:
            for role, root in roots.items():
                placement.threads[role] = pins.pin(process_tree(root),
                                                   set(placement.groups[role]))
            placement.threads[CLIENT] = pins.pin([os.getpid()], set(placement.groups[CLIENT]))
        yield placement
    finally:
        pins.restore()
