"""Which executor runs a host: the one table that names them.

An executor is one module holding one :class:`pipeline.hosts.executor.Executor` subclass. Its
kind is named here, once, as ``"module:Class"``, and imported only when a host of that kind
is used (so reading a spec never imports fabric, and a machine without Slurm never needs
anything of it). A host's kind follows from its entry: ``scheduler: NAME`` picks that
scheduler's executor, ``host:`` alone picks SSH, neither picks this machine.

Adding an executor, e.g. for PBS: write ``pipeline/hosts/pbs.py`` with ``class PBSExecutor
(Executor)`` whose constructor takes ``(host, *, hosts=None, notify=None, **kwargs)``, and
add ``"pbs": "pipeline.hosts.pbs:PBSExecutor"`` to :data:`SCHEDULERS` (or call
:func:`register_executor` from a plugin with ``scheduler=True``). ``scheduler: pbs`` is then
accepted by the spec and reaches that class. Standard library only.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

__all__ = ["EXECUTORS", "SCHEDULERS", "executor_class", "executor_kind", "register_executor"]

#: Kinds of host that are a transport: where shell commands and files go.
EXECUTORS: dict[str, str] = {
    "local": "pipeline.hosts.local:LocalExecutor",
    "ssh": "pipeline.hosts.ssh:SSHExecutor",
}
#: Kinds a host names with ``scheduler:``; each submits jobs through a transport above.
SCHEDULERS: dict[str, str] = {
    "slurm": "pipeline.hosts.slurm:SlurmExecutor",
}


class _HostLike(Protocol):
    @property
    def is_ssh(self) -> bool: ...
    scheduler: str | None


def register_executor(kind: str, target: str, *, scheduler: bool = False) -> None:
    """Name the ``"module:Class"`` that runs hosts of ``kind``."""
    if ":" not in target:
        raise ValueError(f"executor target {target!r} must read 'module:Class'")
    (SCHEDULERS if scheduler else EXECUTORS)[kind] = target


def executor_kind(host: _HostLike, *, transport: bool = False) -> str:
    """``slurm`` (or another scheduler), ``ssh`` or ``local``. ``transport`` asks for the
    kind beneath a scheduler: how its commands reach the login node."""
    if host.scheduler and not transport:
        return host.scheduler
    return "ssh" if host.is_ssh else "local"


def executor_class(kind: str) -> type[Any]:
    """The class registered for ``kind``, imported now."""
    target = SCHEDULERS.get(kind) or EXECUTORS.get(kind)
    if target is None:
        known = ", ".join(sorted({*EXECUTORS, *SCHEDULERS}))
        raise KeyError(f"no executor registered for {kind!r} (known: {known})")
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)
