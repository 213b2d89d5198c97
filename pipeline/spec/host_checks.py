"""What a host entry must satisfy beyond its types: host-key settings that agree, and
scheduler resources only on a scheduler's host, each well formed. Called by
:func:`pipeline.spec.load.parse_spec` for every host; ``fail(where, message)`` raises the
spec's one-line error."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.registry import SCHEDULERS

if TYPE_CHECKING:
    from pipeline.spec.models import HostSpec

__all__ = ["SCHEDULER_ONLY", "check_host"]

LOCAL = "local"
SCHEDULER_ONLY = ("partition", "gpus", "cpus", "mem", "time", "account", "nodes", "sbatch",
                  "scheduler_poll")
_GPUS = re.compile(r"(?:[A-Za-z0-9_.-]+:)?[0-9]+")
_MEM = re.compile(r"[0-9]+[KMGT]?", re.IGNORECASE)
Fail = Callable[[str, str], None]


def check_host(host: HostSpec, at: str, fail: Fail) -> None:
    _host_keys(host, at, fail)
    _scheduler(host, at, fail)


def _host_keys(host: HostSpec, at: str, fail: Fail) -> None:
    if host.host_key == "accept-new":
        if host.insecure_host_key:
            fail(f"{at}.host_key", "`host_key: accept-new` and `insecure_host_key: true` "
                                   "contradict each other; keep one")
        if not host.known_hosts:
            fail(f"{at}.host_key", "`host_key: accept-new` records new keys into the file "
                                   "`known_hosts` names; name one (it is created if missing)")


def _scheduler(host: HostSpec, at: str, fail: Fail) -> None:
    if host.scheduler is None:
        for field in SCHEDULER_ONLY:
            if field in host.model_fields_set:
                fail(f"{at}.{field}", f"`{field}` is a scheduler resource; add "
                                      "`scheduler: slurm` or drop it")
        return
    if host.scheduler not in SCHEDULERS:
        fail(f"{at}.scheduler", f"unknown scheduler {host.scheduler!r}"
                                f"{_suggest(host.scheduler)} "
                                f"(known: {', '.join(sorted(SCHEDULERS))})")
    if host.name == LOCAL:
        fail(f"{at}.scheduler", "`local` is this machine; give the cluster its own name")
    gpus = host.gpus
    if (isinstance(gpus, int) and gpus < 0) or \
            (isinstance(gpus, str) and not _GPUS.fullmatch(gpus)):
        fail(f"{at}.gpus", f"bad gpus {gpus!r}: a count (8) or type:count (a100:8)")
    mem = host.mem
    if (isinstance(mem, int) and mem < 1) or (isinstance(mem, str) and not _MEM.fullmatch(mem)):
        fail(f"{at}.mem", f"bad mem {mem!r}: megabytes (4096) or a size such as 64G or 512M")
    for i, flag in enumerate(host.sbatch):
        if not flag.startswith("-"):
            fail(f"{at}.sbatch[{i}]", f"{flag!r} is not a flag: sbatch flags start with '-' "
                                      "(write `--qos=high`, not `--qos high`)")


def _suggest(word: str) -> str:
    close = difflib.get_close_matches(word, list(SCHEDULERS), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
