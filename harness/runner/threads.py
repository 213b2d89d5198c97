"""How many CPU threads a stage gets on the runner's own machine.

Torch starts as many threads as the machine has cores, whatever else runs there. On a
busy machine those threads wait on each other at every parallel step (an OpenMP thread
that lost its core holds up the rest), and the main job took 28 minutes beside other
work where one thread took 5. So a CPU stage on the local host gets::

    threads = (cores this process may use - cores other work keeps busy) / stages running here

at least 1: ``OMP_NUM_THREADS`` in its environment, which the stage code also gives to
torch's intra-op and inter-op pools (``pipeline.eagle3.common.use_threads``), with the
reason in ``HARNESS_THREADS_WHY`` for its log to say.

- *cores it may use*: the CPU affinity, capped by a cgroup CPU quota (a container's);
- *other work*: the runnable threads of the machine less the threads our own stages hold,
  the larger of two readings: now (``/proc/stat``'s ``procs_running``, a few samples over
  a fifth of a second) and over the last minute (the load average, less what this
  runner's earlier stages left in it). A lull of a moment does not hand a long stage
  more threads than a busy minute leaves room for: too few threads cost a stage at most
  the cores it left idle, too many cost it several times over;
- *stages running here*: this user's CPU stages running on this machine now, whichever
  ``harness run`` started them (two copies of the main job share the cores). Each holds a
  locked file in a directory of the temp dir while it runs; a runner that dies lets its
  lock go, so a slot never outlives its holder.

A stage's ``env: {OMP_NUM_THREADS: N}`` (or its host's), ``with: {threads: N}``, or
``OMP_NUM_THREADS`` exported where ``harness run`` starts, sets the count instead. GPU stages (``device`` other than ``cpu``), serving stages, ``run:`` commands
and stages on SSH hosts or clusters are left as they are.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.spec.models import HostSpec, Stage

__all__ = ["Share", "claim", "cpu_stage", "other_work", "usable_cores"]

THREADS_VAR = "OMP_NUM_THREADS"
WHY_VAR = "HARNESS_THREADS_WHY"
# Actions that drive vLLM or a GPU host's checks, not torch on this CPU.
NOT_CPU = frozenset({"eagle3.serve", "eagle3.benchmark", "eagle3.preflight"})
SAMPLES = 5
SAMPLE_EVERY = 0.04  # seconds


@dataclass
class Share:
    """What one stage was given; ``env`` goes into its job's environment."""

    threads: int | None = None
    why: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        """For the runner's own output, beside "started"."""
        if self.threads is None:
            return ""
        return f"{self.threads} CPU thread{'s' if self.threads != 1 else ''}: {self.why}"


def cpu_stage(stage: Stage, host: HostSpec) -> bool:
    """A built-in action that runs torch on this machine's CPU."""
    if host.is_ssh or host.scheduler or stage.action is None or stage.action in NOT_CPU:
        return False
    return stage.params.get("device", "cpu") == "cpu"


def usable_cores() -> int:
    """The cores this process may run on: its affinity, capped by a cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, math.ceil(quota)) if quota else cores)


def _cgroup_quota() -> float | None:
    """Cores' worth of CPU time the cgroup allows (cgroup v2, else v1), or None."""
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def other_work(ours: int = 0, samples: int = SAMPLES, every: float = SAMPLE_EVERY) -> float:
    """Threads of other work that want a core: the larger of the runnable threads now (a
    few samples, less this one) and the one-minute load average (less what this process's
    earlier stages left in it), each less ``ours`` (the threads our running stages hold).
    Without ``/proc/stat`` (not Linux): the load average alone."""
    averaged = os.getloadavg()[0] - _left_in_load_average() - ours
    counts = []
    for i in range(samples):
        if i:
            time.sleep(every)
        running = _procs_running()
        if running is None:
            return max(0.0, averaged)
        counts.append(running - 1)  # this thread, reading
    return max(0.0, sum(counts) / len(counts) - ours, averaged)


# The stages this process ran: (threads, start, end) on the monotonic clock.
_RAN: list[tuple[int, float, float]] = []


def _left_in_load_average() -> float:
    """What this process's finished stages still add to the one-minute load average, which
    moves toward the runnable count by exp(-t/60): n (1 - e^(-run/60)) e^(-since/60)."""
    now = time.monotonic()
    return sum(n * (1 - math.exp(-(end - start) / 60)) * math.exp(-(now - end) / 60)
               for n, start, end in _RAN)


def _procs_running() -> int | None:
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"procs_running "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _slots_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"todo-harness-{os.getuid()}" / "cpu-stages"


class _Slot:
    """This stage's place among the CPU stages running here: a file it holds locked."""

    def __init__(self) -> None:
        folder = _slots_dir()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Locked under a name others skip, then renamed: never seen unheld (and removed).
        fd, name = tempfile.mkstemp(dir=folder, prefix=".new-")
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.path = folder / f"{os.getpid()}-{Path(name).name[5:]}"
        os.rename(name, self.path)
        self.fd = fd

    def set(self, threads: int) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(threads).encode(), 0)

    def others(self) -> list[int]:
        """The threads of each other stage holding a slot (0: not decided yet). A file
        nobody holds is a dead runner's: removed."""
        held = []
        for path in self.path.parent.iterdir():
            if path == self.path or path.name.startswith("."):
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue  # removed meanwhile
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    text = os.pread(fd, 16, 0).decode(errors="replace").strip()
                    held.append(int(text) if text.isdigit() else 0)
                else:
                    with contextlib.suppress(OSError):
                        path.unlink()
            finally:
                os.close(fd)
        return held

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)


@contextlib.contextmanager
def claim(stage: Stage, host: HostSpec) -> Iterator[Share]:
    """The threads ``stage`` gets on ``host``, held among this machine's CPU stages until
    the block ends (the runner holds it while it watches the job)."""
    if not cpu_stage(stage, host):
        yield Share()
        return
    try:
        slot: _Slot | None = _Slot()
    except OSError:
        slot = None  # no shared temp dir: counted alone, which is what we did before
    started = time.monotonic()
    share = Share()
    try:
        share = _decide(stage, host, slot)
        if slot is not None and share.threads is not None:
            slot.set(share.threads)
        yield share
    finally:
        if slot is not None:
            slot.release()
        if share.threads is not None:
            _RAN.append((share.threads, started, time.monotonic()))
            del _RAN[:-8]  # older ones have left the average


def _decide(stage: Stage, host: HostSpec, slot: _Slot | None) -> Share:
    for given, where in ((stage.env_for(host).get(THREADS_VAR), "the spec's env"),
                         (os.environ.get(THREADS_VAR), "the environment of harness run")):
        if given is not None:  # set by hand: kept, and said
            why = f"{THREADS_VAR}={given} from {where}"
            n = int(given) if given.strip().isdigit() else None
            return Share(n, why, {WHY_VAR: why})
    asked = stage.params.get("threads")
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
        why = f"with: threads: {asked}"
        return Share(asked, why, {THREADS_VAR: str(asked), WHY_VAR: why})
    others = slot.others() if slot is not None else []
    cores = usable_cores()
    busy = other_work(ours=sum(others))
    stages = len(others) + 1
    threads = max(1, min(cores, (cores - math.floor(busy + 0.5)) // stages))
    why = (f"{cores} core{'s' if cores != 1 else ''}, {busy:.1f} busy with other work, "
           f"{stages} stage{'s' if stages != 1 else ''} running here")
    return Share(threads, why, {THREADS_VAR: str(threads), WHY_VAR: why})
