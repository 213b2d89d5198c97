"""The pipeline spec: a YAML file that binds todos to actions on hosts, as typed models.

``load_spec(path)`` reads and validates a file and returns a :class:`Pipeline` whose
defaults are already applied (every stage has a host, retries and timeout; ``local`` is
always among the hosts). Every problem is one :class:`SpecError` whose ``where`` points at
the field, e.g. ``eagle3.yaml: stages[3] (train).timeout``. ``docs/pipelines.md`` is the
reference for the format.

This module is the entry: loading, and the checks across fields (names, references,
gates, gateways, cycles). The types it returns are defined in :mod:`pipeline.spec.models`
and importable from here; the ``needs`` graph is :mod:`pipeline.stage_graph`, and the
wording of pydantic's errors :mod:`pipeline.spec.messages`.

This module uses pydantic, so it runs on the harness side only; stage code on a GPU host
never imports it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipeline.actions import BUILTIN_ACTIONS, gate_problem
from pipeline.errors import SpecError
from pipeline.served_gates import SERVED_SPEEDUP, TAU_GAP, offline_pair, unmeasured_level
from pipeline.spec.host_checks import check_host
from pipeline.spec.messages import from_validation, suggest
from pipeline.spec.models import (
    LOCAL,
    MAX_TIMEOUT_SCALE,
    PRIORITY_RANK,
    Defaults,
    HostSpec,
    Pipeline,
    Stage,
    parse_scale,
)
from pipeline.spec.yamlfile import read_yaml
from pipeline.stage_graph import find_cycle

__all__ = [
    "LOCAL",
    "MAX_TIMEOUT_SCALE",
    "PRIORITY_RANK",
    "Defaults",
    "HostSpec",
    "Pipeline",
    "Stage",
    "load_spec",
    "parse_scale",
    "parse_spec",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SSH_ONLY = ("port", "user", "key", "known_hosts", "insecure_host_key", "host_key",
             "gateway", "connect_timeout", "ssh_config")


def load_spec(path: str | Path) -> Pipeline:
    """Read, validate and resolve a pipeline file. Raises one single-line :class:`SpecError`."""
    path = Path(path)
    data = read_yaml(path)
    pipeline = parse_spec(data, source=str(path), base_dir=path.resolve().parent)
    pipeline._path = path
    return pipeline


def parse_spec(data: Any, *, source: str = "<spec>", base_dir: Path | None = None) -> Pipeline:
    """Validate an already-parsed document. Relative local paths resolve against ``base_dir``."""
    if not isinstance(data, Mapping):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise SpecError(f"expected a mapping with `pipeline`, `hosts` and `stages`, got {got}",
                        where=source)
    data = dict(data)
    hosts = data.get("hosts")
    if isinstance(hosts, Mapping):
        named = {}
        for key, entry in hosts.items():
            if isinstance(entry, Mapping) and "name" in entry:
                raise SpecError("unknown key 'name' (a host is named by its key under `hosts`)",
                                where=f"{source}: hosts.{key}.name")
            named[key] = {**entry, "name": str(key)} if isinstance(entry, Mapping) else entry
        data["hosts"] = named
    try:
        pipeline = Pipeline.model_validate(data)
    except ValidationError as exc:
        raise from_validation(exc, source, data) from None
    _check(pipeline, source)
    _resolve(pipeline, base_dir or Path.cwd())
    return pipeline


def _resolve(p: Pipeline, base_dir: Path) -> None:
    """Apply defaults so the runner never has to: host, retries, timeout, todo, local paths."""
    p.hosts.setdefault(LOCAL, HostSpec(name=LOCAL))
    for host in p.hosts.values():
        if host.is_ssh:
            host.workdir = host.workdir or "~"
            for attr in ("key", "known_hosts", "ssh_config"):
                value = getattr(host, attr)
                if value:
                    resolved = Path(value).expanduser()
                    setattr(host, attr, str(resolved if resolved.is_absolute()
                                            else base_dir / resolved))
        else:
            workdir = Path(host.workdir or ".").expanduser()
            host.workdir = str(workdir if workdir.is_absolute() else (base_dir / workdir))
            if "python" not in host.model_fields_set:
                # this machine: the harness's own interpreter, not whatever python3 is first
                host.python = sys.executable
    for stage in p.stages:
        stage.host = stage.host or p.defaults.host
        stage.retries = p.defaults.retries if stage.retries is None else stage.retries
        stage.timeout = p.defaults.timeout if stage.timeout is None else stage.timeout
        stage.todo = stage.todo or stage.name


def _check(p: Pipeline, source: str) -> None:
    """What types alone cannot say: names, references, exclusivity, cycles."""

    def fail(where: str, message: str) -> None:
        raise SpecError(message, where=f"{source}: {where}")

    host_names = set(p.hosts) | {LOCAL}
    known_hosts = ", ".join(sorted(host_names))
    for name, host in p.hosts.items():
        at = f"hosts.{name}"
        if not _NAME.fullmatch(name):
            fail(at, f"bad host name {name!r}: use letters, digits, '_', '.', '-'")
        if name == LOCAL and host.is_ssh:
            fail(f"{at}.host", "`local` is this machine; give the SSH host its own name")
        if not host.is_ssh:
            for field in _SSH_ONLY:
                if field in host.model_fields_set:
                    fail(f"{at}.{field}", f"`{field}` is for SSH hosts; add `host:` or drop it")
        check_host(host, at, fail)
        _check_env(host.env, f"{at}.env", fail)
        if host.gateway is not None:
            if host.gateway not in p.hosts:
                fail(f"{at}.gateway", f"unknown host {host.gateway!r}{suggest(host.gateway, p.hosts)}"
                                      f" (hosts: {known_hosts})")
            seen = [name]
            hop: HostSpec | None = p.hosts[host.gateway]
            while hop is not None:
                if not hop.is_ssh:
                    fail(f"{at}.gateway", f"gateway {hop.name!r} is not an SSH host")
                if hop.name in seen:
                    fail(f"{at}.gateway",
                         f"gateways form a loop: {' -> '.join([*seen, hop.name])}")
                seen.append(hop.name)
                hop = p.hosts.get(hop.gateway) if hop.gateway else None

    if p.defaults.host not in host_names:
        fail("defaults.host", f"unknown host {p.defaults.host!r}"
                              f"{suggest(p.defaults.host, host_names)} (hosts: {known_hosts})")

    first_at: dict[str, int] = {}
    for i, stage in enumerate(p.stages):
        at = f"stages[{i}] ({stage.name})"
        if not _NAME.fullmatch(stage.name):
            fail(f"stages[{i}].name",
                 f"bad stage name {stage.name!r}: use letters, digits, '_', '.', '-'")
        if stage.name in first_at:
            fail(f"{at}.name", f"duplicate stage name {stage.name!r} "
                               f"(first at stages[{first_at[stage.name]}])")
        first_at[stage.name] = i
        if stage.action is not None and stage.run is not None:
            fail(at, "has both `action` and `run`: a stage runs one of them")
        if stage.action is None and stage.run is None:
            fail(at, "needs `action` (a built-in action) or `run` (a shell command)")
        if stage.with_ is not None and stage.action is None:
            fail(f"{at}.with", "`with` gives parameters to an `action`; this stage has none")
        if stage.launcher is not None and (stage.action is None or not stage.launcher.strip()):
            fail(f"{at}.launcher", "`launcher` starts a built-in `action` (a `run:` command "
                                   "starts itself); give an action, or drop it")
        if stage.action is not None and stage.action not in BUILTIN_ACTIONS:
            fail(f"{at}.action",
                 f"unknown action {stage.action!r}{suggest(stage.action, BUILTIN_ACTIONS)}")
        if stage.run is not None and not stage.run.strip():
            fail(f"{at}.run", "empty command")
        if stage.host is not None and stage.host not in host_names:
            fail(f"{at}.host", f"unknown host {stage.host!r}{suggest(stage.host, host_names)}"
                               f" (hosts: {known_hosts})")
        for key in stage.params:
            if not isinstance(key, str) or not key:
                fail(f"{at}.with", f"parameter names must be text, got {key!r}")
        _check_gate(stage, at, fail)
        _check_env(stage.env, f"{at}.env", fail)

    names = set(first_at)
    for i, stage in enumerate(p.stages):
        for dep in stage.needs:
            if dep not in names:
                fail(f"stages[{i}] ({stage.name}).needs",
                     f"unknown stage {dep!r}{suggest(dep, names)}")
    cycle = find_cycle(p.stages)
    if cycle:
        i = first_at[cycle[0]]
        fail(f"stages[{i}] ({cycle[0]}).needs", f"needs form a cycle: {' -> '.join(cycle)}")
    _check_offline(p, first_at, fail)


def _check_gate(stage: Stage, at: str, fail: Any) -> None:
    """Each gate key names a metric the stage's action reports (``ACTION_METRICS``), or
    is a key on served numbers (:mod:`pipeline.served_gates`) in its own form. The stage
    holds its gate already read into typed values (:mod:`pipeline.gates`); an entry read
    as of the wrong form is refused here, after its key."""
    if stage.gate and stage.action is None:
        fail(f"{at}.gate", "a gate needs an `action`: a `run:` command reports no metrics")
    for key in stage.gate.keys:
        where = f"{at}.gate.{key}"
        problem = gate_problem(stage.action or "", key)
        if problem:
            fail(where, problem)
        bad = stage.gate.problem(key)
        if bad is not None:
            fail(where + (f"[{bad.index}]" if bad.index is not None else ""), bad.problem)
        unmeasured = unmeasured_level(stage) if key == SERVED_SPEEDUP else None
        if unmeasured:
            fail(where, unmeasured)


def _check_offline(p: Pipeline, first_at: Mapping[str, int], fail: Any) -> None:
    """A benchmark's ``max_served_tau_gap`` can find the verify stage it compares with."""
    for stage in p.stages:
        if TAU_GAP in stage.gate:
            pair = offline_pair(p.stages, stage)
            if pair.problem:
                fail(f"stages[{first_at[stage.name]}] ({stage.name}).gate.{TAU_GAP}",
                     pair.problem)


def _check_env(env: Mapping[str, str], at: str, fail: Any) -> None:
    for key in env:
        if not _ENV_NAME.fullmatch(key):
            fail(f"{at}.{key}", f"bad environment variable name {key!r}")
