"""What a test session must not leave running: the processes its tests started.

A process is the session's when it carries the session's mark in its environment (every
child of the pytest process inherits it, detached jobs included, however they were
reparented) or when its working directory is under the session's temporary directory
(jobs started over SSH, whose environment sshd made afresh, run in a workdir there).
``tests/conftest.py`` checks for them once every session fixture has stopped its daemons;
``tests/slurm.py`` checks its cluster's queue before stopping it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

#: The environment variable every process the session starts inherits (its value: the
#: pytest process's pid, so two sessions on one machine, or xdist workers, are told apart).
MARK = "HARNESS_TEST_SESSION"


def _ancestors(pid: int) -> set[int]:
    found = set()
    while pid > 1:
        found.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def processes_left(mark: str, base: Path) -> dict[int, str]:
    """pid -> command line of each live process of the session (not this one, nor its
    ancestors; zombies are gone already)."""
    mine = _ancestors(os.getpid())
    children = set(descendants([os.getpid()]))  # one forked but not yet exec'd, too
    wanted = f"{MARK}={mark}".encode()
    base = base.resolve()
    found: dict[int, str] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if pid in mine:
            continue
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            ours = pid in children or \
                wanted in (proc / "environ").read_bytes().split(b"\0")
            if not ours:
                cwd = Path(os.readlink(proc / "cwd"))
                ours = cwd == base or base in cwd.parents
            if ours:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").strip()
                found[pid] = cmd.decode(errors="replace")[:160] or f"[{proc.name}]"
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or another user's
    return found


def wait_until_empty(find: Callable[[], dict[int, str]], seconds: float) -> dict[int, str]:
    """What ``find`` still reports after up to ``seconds`` (processes being stopped get
    that long to go). Empty only when two looks a second apart find nothing: a process
    just being started (forked, not yet exec'd elsewhere) shows by the second."""
    deadline = time.monotonic() + seconds
    empty_since: float | None = None
    while True:
        left = find()
        now = time.monotonic()
        if left:
            empty_since = None
        elif empty_since is None:
            empty_since = now
        elif now - empty_since >= 1.0:
            return {}
        if left and now >= deadline:
            return left
        time.sleep(0.5)


def kill(pids: dict[int, str]) -> None:
    """SIGKILL each (after the report: the next session starts clean)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def descendants(roots: list[int]) -> list[int]:
    """Every live process below ``roots`` (by parent pid, read from /proc)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    found: list[int] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
