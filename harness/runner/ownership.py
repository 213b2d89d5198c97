"""Who owns a run, and where its job lives on its host.

A run records the runner that claimed it (``host:pid``) and its job's key and host. A later
runner uses them to tell a live owner from a dead one and to find the job again.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from pipeline.spec.models import HostSpec
from state.store import Store

RUNNER = "runner"
ACTIVE = ("queued", "running")


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str | None) -> bool:
    """Is the runner that claimed a run still alive? Only answerable on the same machine;
    a runner elsewhere is assumed alive (its host is not ours to judge)."""
    if not owner or owner == owner_id():
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive (pid 1 here may never reap it)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return True


def job_key(store: Store, run_id: int) -> str:
    """The run's directory name on the host: unique across stores sharing a workdir."""
    return f"{store.store_id[:8]}-r{run_id}"


def host_record(host: HostSpec) -> dict[str, Any]:
    """What a later process needs to reach the host again. Never the env: it may hold
    secrets, and the job has its environment already."""
    return host.model_dump(exclude={"env"}, mode="json")
