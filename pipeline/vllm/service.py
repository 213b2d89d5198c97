"""A long-running server that a stage leaves behind, and how to stop it.

A serve stage starts a server (vLLM) in its own session, so the server's process group
outlives the stage's job, and reports it in its result as ``metrics.service``::

    {"url": "http://127.0.0.1:8000", "pid": 4242, "pgid": 4242, "start_time": "123456",
     "port": 8000, "log": "/data/eagle3/.harness/runs/ab12-r3/server.log", "keep": false,
     "ready": true}

``ready: false`` is a server started without waiting for it (``wait: false``): it may still
be loading, and ``started_at`` (the host's clock) plus ``health_timeout`` says until when
the harness waits for it (:mod:`pipeline.vllm.ready`).

The harness stops it when the pipeline run ends (unless ``keep``): TERM to the whole
process group (vLLM's API server and its EngineCore/worker processes), then KILL after a
grace period. :func:`stop_argv` is that, as one argv for ``Executor.run`` on the server's
host; :func:`stop_group` is the same on this machine, for the serve action itself.

``start_time`` is the leader's start time from ``/proc/PID/stat`` (field 22): a live leader
with another start time is a different process that reused the pid, and is left alone.

Standard library only: this module ships to bare GPU hosts.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["ServiceRecord", "group_members", "process_start_time", "process_tree", "stop_argv",
           "stop_group"]


@dataclass(frozen=True)
class ServiceRecord:
    url: str
    pid: int
    pgid: int
    start_time: str | None = None
    port: int | None = None
    log: str | None = None
    keep: bool = False
    # A server started without waiting (``wait: false``): the harness waits for it before
    # the first stage that needs it, until ``started_at + health_timeout`` (host clock).
    ready: bool = True
    started_at: float | None = None
    health_timeout: float | None = None
    stop_grace: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServiceRecord | None:
        """A record from a stage result's ``metrics.service``; None if it is not one."""
        try:
            return cls(url=str(data["url"]), pid=int(data["pid"]), pgid=int(data["pgid"]),
                       start_time=None if data.get("start_time") is None
                       else str(data["start_time"]),
                       port=None if data.get("port") is None else int(data["port"]),
                       log=data.get("log"), keep=bool(data.get("keep", False)),
                       ready=bool(data.get("ready", True)),
                       started_at=_float(data.get("started_at")),
                       health_timeout=_float(data.get("health_timeout")),
                       stop_grace=_float(data.get("stop_grace")))
        except (KeyError, TypeError, ValueError):
            return None


def _float(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` split after the command name (field 3 is index 0), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_start_time(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def _live_processes() -> list[tuple[int, list[str]]]:
    """Every live (not zombie) process we can read: (pid, its stat fields after the name)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) > 2 and fields[0] != "Z":
            found.append((int(entry.name), fields))
    return found


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``."""
    if not Path("/proc/self").exists():
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    return [pid for pid, fields in _live_processes() if fields[2] == str(pgid)]


def process_tree(root: int) -> list[int]:
    """``root`` and every live process below it, by parent pid (a server's API process,
    its EngineCore and workers, whatever process group they are in)."""
    children: dict[int, list[int]] = {}
    for pid, fields in _live_processes():
        children.setdefault(int(fields[1]), []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.append(pid)
            todo.extend(children.get(pid, []))
    return tree


def stop_group(pgid: int, grace: float = 10.0, start_time: str | None = None) -> str:
    """TERM the group, KILL it after ``grace`` s. Returns terminated/killed/gone/not-ours."""
    if start_time is not None:
        now = process_start_time(pgid)
        if now is not None and now != start_time:
            return "not-ours"
    if not group_members(pgid):
        return "gone"
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return "gone"
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return "terminated"
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return "terminated"
    deadline = time.monotonic() + 5
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return "killed"


# The same as stop_group, as POSIX sh for a host reached through an executor. Arguments:
# $1 pgid, $2 leader start time ("-" for unknown), $3 grace in tenths of a second.
_STOP_SH = r"""
g=$1; st=$2; n=$3
members() {
  for f in /proc/[0-9]*/stat; do
    read -r s 2>/dev/null < "$f" || continue
    r=${s##*) }
    set -- $r
    [ "$3" = "$g" ] && [ "$1" != Z ] && return 0
  done
  return 1
}
if [ "$st" != - ] && [ -r "/proc/$g/stat" ]; then
  read -r s < "/proc/$g/stat"; r=${s##*) }; set -- $r
  [ "${20}" = "$st" ] || { echo not-ours; exit 0; }
fi
members || { echo gone; exit 0; }
kill -TERM -"$g" 2>/dev/null || { echo gone; exit 0; }
i=0
while members && [ $i -lt "$n" ]; do sleep 0.1; i=$((i+1)); done
members || { echo terminated; exit 0; }
kill -KILL -"$g" 2>/dev/null
i=0
while members && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
if members; then echo stuck; else echo killed; fi
"""


def stop_argv(record: ServiceRecord, grace: float = 10.0) -> list[str]:
    """The argv that stops ``record``'s process group on its host (prints the outcome)."""
    return ["sh", "-c", _STOP_SH, "sh", str(record.pgid), record.start_time or "-",
            str(max(1, int(grace * 10)))]
