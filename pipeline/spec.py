"""The pipeline spec: a YAML file that binds todos to actions on hosts, as typed models.

``load_spec(path)`` reads and validates a file and returns a :class:`Pipeline` whose
defaults are already applied (every stage has a host, retries and timeout; ``local`` is
always among the hosts). Every problem is one :class:`SpecError` whose ``where`` points at
the field, e.g. ``eagle3.yaml: stages[3] (train).timeout``. ``docs/pipelines.md`` is the
reference for the format.

This module uses pydantic, so it runs on the harness side only; stage code on a GPU host
never imports it.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

from pipeline.actions import BUILTIN_ACTIONS, gate_problem, params_to_argv
from pipeline.durations import parse_duration
from pipeline.errors import SpecError
from pipeline.host_checks import check_host
from pipeline.yamlfile import read_yaml

__all__ = [
    "LOCAL",
    "MAX_TIMEOUT_SCALE",
    "PRIORITY_RANK",
    "Defaults",
    "HostSpec",
    "Pipeline",
    "Stage",
    "find_cycle",
    "load_spec",
    "parse_scale",
    "parse_spec",
    "topological_order",
]

LOCAL = "local"
PRIORITY_RANK = {"high": 0, "medium": 1, "low": 2}
_PRIORITY_ALIASES = {"h": "high", "m": "medium", "l": "low",
                     "high": "high", "medium": "medium", "low": "low"}
# Stage and host names end up in run ids, CLI flags and `needs`; keep them plain.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SSH_ONLY = ("port", "user", "key", "known_hosts", "insecure_host_key", "host_key",
             "gateway", "connect_timeout", "ssh_config")



def _priority(value: object) -> str:
    if isinstance(value, str) and value.strip().lower() in _PRIORITY_ALIASES:
        return _PRIORITY_ALIASES[value.strip().lower()]
    raise ValueError(f"bad priority {value!r}: use high, medium or low (or H, M, L)")


def _as_list(value: object) -> object:
    """``needs: train`` means ``needs: [train]``; ``needs:`` (null) means none."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else value


def _env_values(value: object) -> object:
    """Scalars become strings (``PORT: 8000`` is fine); anything else is left to fail."""
    if not isinstance(value, Mapping):
        return value
    out: dict[object, object] = {}
    for k, v in value.items():
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, (int, float)):
            out[k] = str(v)
        else:
            out[k] = v
    return out


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def _threshold(value: object) -> float | list[float]:
    """A gate threshold: a number, or a list of numbers (one per position, e.g.
    ``min_position_acceptance: [0.6, 0.4, 0.2]``)."""
    if isinstance(value, list):
        if not value:
            raise ValueError("expected a number or a non-empty list of numbers")
        try:
            return [_number(v) for v in value]
        except ValueError:
            raise ValueError(f"expected a list of numbers, got {value!r}") from None
    return _number(value)


Duration = Annotated[float, BeforeValidator(parse_duration)]
PriorityName = Annotated[Literal["high", "medium", "low"], BeforeValidator(_priority)]
StrList = Annotated[list[StrictStr], BeforeValidator(_as_list)]
EnvMap = Annotated[dict[str, StrictStr], BeforeValidator(_env_values)]
Number = Annotated[float, BeforeValidator(_number)]
Threshold = Annotated[float | list[float], BeforeValidator(_threshold)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HostSpec(_Model):
    """Where a stage runs. An entry with ``host`` is an SSH host; one without is this machine."""

    name: StrictStr = LOCAL
    #: An address, a name, or a ``Host`` alias of the ssh_config (see ``ssh_config``).
    host: StrictStr | None = None
    #: None: the ssh_config's ``Port``, else 22. The same for ``user`` and ``key``: a
    #: field given here overrides the ssh_config, one left out defers to it.
    port: StrictInt | None = Field(None, ge=1, le=65535)
    user: StrictStr | None = None
    key: StrictStr | None = None
    known_hosts: StrictStr | None = None
    insecure_host_key: StrictBool = False
    #: ``check``: refuse an unknown or changed key. ``accept-new``: record a key seen for
    #: the first time into ``known_hosts`` (which must be named), still refuse a changed one.
    host_key: Literal["check", "accept-new"] = "check"
    #: The ssh_config file to read; None reads ~/.ssh/config and /etc/ssh/ssh_config.
    ssh_config: StrictStr | None = None
    gateway: StrictStr | None = None
    connect_timeout: Duration = 10.0
    workdir: StrictStr | None = None
    python: StrictStr = "python3"
    env: EnvMap = Field(default_factory=dict)
    #: ``slurm``: stages are batch jobs submitted with sbatch, here or on the login node
    #: that ``host`` names. The fields below are its resources, for every job of this host.
    scheduler: StrictStr | None = None
    partition: StrictStr | None = None
    account: StrictStr | None = None
    nodes: StrictInt | None = Field(None, ge=1)
    #: GPUs per node: a count, or ``type:count`` (``a100:8``); becomes ``--gres=gpu:...``.
    gpus: StrictInt | StrictStr | None = None
    cpus: StrictInt | None = Field(None, ge=1)
    #: Memory per node as Slurm writes it: ``64G``, ``512M``, or a number of megabytes.
    mem: StrictInt | StrictStr | None = None
    time: Duration | None = None
    #: More sbatch flags, as given (``["--qos=high", "--exclusive"]``).
    sbatch: StrList = Field(default_factory=list)
    #: How often the one watcher asks the scheduler about all live jobs of this host.
    scheduler_poll: Duration = 5.0

    @property
    def is_ssh(self) -> bool:
        return self.host is not None

    @property
    def label(self) -> str:
        """``root@gpu-container:22`` for SSH hosts (the port when given), ``local``
        otherwise, ``gpu16 (slurm via hpc-login)`` for a scheduler; for messages."""
        if not self.is_ssh:
            where = self.name
        else:
            user = f"{self.user}@" if self.user else ""
            where = f"{user}{self.host}" + (f":{self.port}" if self.port else "")
        return f"{self.name} ({self.scheduler} via {where})" if self.scheduler else where


MAX_TIMEOUT_SCALE = 1000.0


def parse_scale(value: object) -> float:
    """A factor for every stage's timeout (``2`` on a machine half as fast)."""
    x = _number(value)
    if not 0 < x <= MAX_TIMEOUT_SCALE:
        raise ValueError(f"bad timeout_scale {value!r}: a number above 0 and at most "
                         f"{MAX_TIMEOUT_SCALE:g}")
    return x


TimeoutScale = Annotated[float, BeforeValidator(parse_scale)]


class Defaults(_Model):
    host: StrictStr = LOCAL
    retries: StrictInt = Field(0, ge=0)
    timeout: Duration | None = None
    #: every stage's timeout times this (``harness run --timeout-scale`` replaces it)
    timeout_scale: TimeoutScale = 1.0


class Stage(_Model):
    """One step of the pipeline, bound to one todo."""

    name: StrictStr
    todo: StrictStr | None = None
    priority: PriorityName = "medium"
    needs: StrList = Field(default_factory=list)
    action: StrictStr | None = None
    with_: dict[str, Any] | None = Field(default=None, alias="with")
    run: StrictStr | None = None
    host: StrictStr | None = None
    outputs: StrList = Field(default_factory=list)
    checks: StrList = Field(default_factory=list)
    gate: dict[str, Threshold] = Field(default_factory=dict)
    retries: StrictInt | None = Field(None, ge=0)
    timeout: Duration | None = None
    env: EnvMap = Field(default_factory=dict)
    #: Shell text that takes the interpreter's place for a built-in action, e.g.
    #: ``srun ... "$HARNESS_PYTHON" -m torch.distributed.run --nproc-per-node 8`` for
    #: multi-node training on Slurm; the action's own ``-m module args`` follow it.
    launcher: StrictStr | None = None

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.with_ or {})

    @property
    def is_builtin(self) -> bool:
        return self.action is not None

    def command(self, host: HostSpec, *, result_path: str = "result.json") -> list[str]:
        """The argv that runs this stage on ``host``.

        A built-in action is ``python -m <module> --flag value ... --result PATH``: parameters
        are separate argv items, never shell text. A ``run:`` command is the user's own shell
        text, run by ``bash -c`` exactly as written: not a login shell, since profiles are
        slow and differ between hosts (set PATH and friends with the host's ``env``).
        Executors quote the argv as a whole when it crosses a shell, so the text reaches bash
        unchanged and only bash parses it.
        """
        if self.action is not None:
            args = ["-m", BUILTIN_ACTIONS[self.action], *params_to_argv(self.params),
                    "--result", result_path]
            if self.launcher:
                # the launcher is shell text; the action's argv stays argv ("$@")
                return ["bash", "-c", f'{self.launcher} "$@"', "launcher", *args]
            return [host.python, *args]
        if self.run is None:  # load_spec refuses such a stage; a hand-built one may not
            raise SpecError("has neither `action` nor `run`", where=f"stages ({self.name})")
        return ["bash", "-c", self.run]

    def env_for(self, host: HostSpec, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The job environment: host env, overridden by stage env, overridden by ``extra``."""
        return {**host.env, **self.env, **(extra or {})}


class Pipeline(_Model):
    pipeline: StrictStr
    hosts: dict[str, HostSpec] = Field(default_factory=dict)
    defaults: Defaults = Field(default_factory=Defaults)
    stages: list[Stage] = Field(min_length=1)

    _path: Path | None = PrivateAttr(default=None)

    @property
    def name(self) -> str:
        return self.pipeline

    @property
    def path(self) -> Path | None:
        """The file this was loaded from, if any."""
        return self._path

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def host_for(self, stage: Stage | str) -> HostSpec:
        stage = self.stage(stage) if isinstance(stage, str) else stage
        return self.hosts[stage.host or self.defaults.host]

    def order(self) -> list[Stage]:
        """Stages in an order that respects ``needs``; ties keep file order."""
        return topological_order(self.stages)


# --- graph helpers ----------------------------------------------------------------------


def find_cycle(stages: Sequence[Stage]) -> list[str] | None:
    """A cycle in ``needs`` as ``[a, b, a]``, or None. Unknown names are ignored."""
    needs = {s.name: [n for n in s.needs] for s in stages}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dep in needs.get(name, []):
            if dep not in needs:
                continue
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[name] = 2
        return None

    for stage in stages:
        if stage.name not in state and (found := visit(stage.name)):
            return found
    return None


def topological_order(stages: Sequence[Stage]) -> list[Stage]:
    """Kahn's algorithm, always taking the earliest ready stage in file order."""
    by_name = {s.name: s for s in stages}
    waiting = {s.name: {n for n in s.needs if n in by_name} for s in stages}
    done: list[Stage] = []
    while waiting:
        ready = [s for s in stages if s.name in waiting and not waiting[s.name]]
        if not ready:
            cycle = find_cycle(stages) or sorted(waiting)
            raise SpecError(f"needs form a cycle: {' -> '.join(cycle)}")
        first = ready[0]
        done.append(first)
        del waiting[first.name]
        for deps in waiting.values():
            deps.discard(first.name)
    return done


# --- loading ----------------------------------------------------------------------------


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
        raise _from_validation(exc, source, data) from None
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
                fail(f"{at}.gateway", f"unknown host {host.gateway!r}{_suggest(host.gateway, p.hosts)}"
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
                              f"{_suggest(p.defaults.host, host_names)} (hosts: {known_hosts})")

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
                 f"unknown action {stage.action!r}{_suggest(stage.action, BUILTIN_ACTIONS)}")
        if stage.run is not None and not stage.run.strip():
            fail(f"{at}.run", "empty command")
        if stage.host is not None and stage.host not in host_names:
            fail(f"{at}.host", f"unknown host {stage.host!r}{_suggest(stage.host, host_names)}"
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
                     f"unknown stage {dep!r}{_suggest(dep, names)}")
    cycle = find_cycle(p.stages)
    if cycle:
        i = first_at[cycle[0]]
        fail(f"stages[{i}] ({cycle[0]}).needs", f"needs form a cycle: {' -> '.join(cycle)}")


def _check_gate(stage: Stage, at: str, fail: Any) -> None:
    """Each gate key names a metric the stage's action reports (``ACTION_METRICS``)."""
    if stage.gate and stage.action is None:
        fail(f"{at}.gate", "a gate needs an `action`: a `run:` command reports no metrics")
    for key in stage.gate:
        problem = gate_problem(stage.action or "", key)
        if problem:
            fail(f"{at}.gate.{key}", problem)


def _check_env(env: Mapping[str, str], at: str, fail: Any) -> None:
    for key in env:
        if not _ENV_NAME.fullmatch(key):
            fail(f"{at}.{key}", f"bad environment variable name {key!r}")


def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --- pydantic errors -> one SpecError ---------------------------------------------------

_MODELS: dict[str, type[BaseModel]] = {"hosts": HostSpec, "stages": Stage,
                                       "defaults": Defaults}


def _keys_at(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed in the mapping at ``loc``, for "did you mean"."""
    if not loc:
        model: type[BaseModel] = Pipeline
    elif loc[0] in _MODELS and (loc[0] == "defaults" or len(loc) == 2):
        model = _MODELS[loc[0]]
    else:
        return []
    keys = [f.alias or name for name, f in model.model_fields.items()]
    return [k for k in keys if not (model is HostSpec and k == "name")]


def _where(source: str, loc: tuple[Any, ...], data: Mapping[str, Any]) -> str:
    text = ""
    for i, item in enumerate(loc):
        if item == "[key]":
            continue
        if isinstance(item, int):
            text += f"[{item}]"
            if loc[:i] == ("stages",):
                stages = data.get("stages")
                try:
                    name = stages[item].get("name")  # type: ignore[index,union-attr]
                except (AttributeError, IndexError, KeyError, TypeError):
                    name = None
                if isinstance(name, str):
                    text += f" ({name})"
        else:
            text += f".{item}" if text else str(item)
    return f"{source}: {text}" if text else source


def _from_validation(exc: ValidationError, source: str, data: Mapping[str, Any]) -> SpecError:
    errors = exc.errors()
    err = errors[0]
    loc = tuple(err["loc"])
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        message = f"unknown key {key!r}{_suggest(key, _keys_at(loc[:-1]))}"
    elif kind == "missing":
        message = f"missing required key {loc[-1]!r}"
        loc = loc[:-1]  # point at the mapping that lacks it
    elif kind in ("model_type", "dict_type", "model_attributes_type"):
        message = f"expected a mapping, got {_show(given)}"
    elif kind == "list_type":
        message = f"expected a list, got {_show(given)}"
    elif kind == "too_short":
        message = "needs at least one entry"
    elif kind == "value_error":
        message = str(err["msg"]).removeprefix("Value error, ")
    else:
        msg = str(err["msg"])
        message = f"{msg[:1].lower()}{msg[1:]}, got {_show(given)}"
    extra = len(errors) - 1
    if extra:
        message += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return SpecError(" ".join(message.split()), where=_where(source, loc, data))


def _show(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
