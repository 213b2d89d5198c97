"""The types of a pipeline spec: hosts, defaults, stages, the pipeline, as pydantic models.

Field types carry the coercions a YAML author expects (``needs: train`` is ``[train]``,
``timeout: 2h`` is seconds, ``PORT: 8000`` is text); what types alone cannot say (names,
references, cycles) is checked when a file is loaded (:mod:`pipeline.spec.load`).
``docs/pipelines.md`` is the reference for the format. This module uses pydantic, so it
runs on the harness side only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetPydanticSchema,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
)
from pydantic_core import core_schema

from pipeline.actions import BUILTIN_ACTIONS, canonical_action, params_to_argv
from pipeline.errors import SpecError
from pipeline.gates import Gate, read_gate
from pipeline.spec.durations import parse_duration
from pipeline.stage_graph import topological_order

__all__ = ["LOCAL", "MAX_TIMEOUT_SCALE", "PRIORITY_RANK", "Defaults", "HostSpec", "Pipeline",
           "Stage", "parse_scale"]

LOCAL = "local"
PRIORITY_RANK = {"high": 0, "medium": 1, "low": 2}
_PRIORITY_ALIASES = {"h": "high", "m": "medium", "l": "low",
                     "high": "high", "medium": "medium", "low": "low"}
# Stage and host names end up in run ids, CLI flags and `needs`; keep them plain.


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


def _threshold(value: object
               ) -> float | list[float] | dict[str, Any] | list[dict[str, Any]] | bool:
    """A gate threshold: a number, or a list of numbers (one per position, e.g.
    ``min_position_acceptance: [0.6, 0.4, 0.2]``); the keys on served numbers take a
    mapping or a list of them (``min_served_speedup: {at: 1, min: 1.3}``), and
    ``require_vllm`` true or false, which :func:`pipeline.spec.load._check_gate` validates
    with the key in hand."""
    if isinstance(value, (dict, bool)) or (isinstance(value, list) and value
                                           and all(isinstance(v, dict) for v in value)):
        return value  # type: ignore[return-value]
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
Threshold = Annotated[StrictBool | float | list[float] | dict[str, Any] | list[dict[str, Any]],
                      BeforeValidator(_threshold)]


def _gate_schema(_source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """A ``gate:`` mapping: each entry shaped on its own (a bad number is located at its
    key), then read once into typed values (:func:`pipeline.gates.read_gate`), which is
    what the stage holds; it is written back out in the form it was read from."""
    return core_schema.no_info_before_validator_function(
        lambda v: v.to_json() if isinstance(v, Gate) else v,
        core_schema.no_info_after_validator_function(read_gate, handler(dict[str, Threshold])),
        serialization=core_schema.plain_serializer_function_ser_schema(Gate.to_json))


GateField = Annotated[Gate, GetPydanticSchema(_gate_schema)]


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
    # an old name (eagle3.verifier) is read as the one it became, so the stage, its todo
    # and its history carry one name
    action: Annotated[StrictStr, AfterValidator(canonical_action)] | None = None
    with_: dict[str, Any] | None = Field(default=None, alias="with")
    run: StrictStr | None = None
    host: StrictStr | None = None
    outputs: StrList = Field(default_factory=list)
    checks: StrList = Field(default_factory=list)
    #: entries of the wrong form are kept as ``Unreadable``: the loader refuses them where
    #: they are, in the order of its other checks (:func:`pipeline.spec.load._check_gate`)
    gate: GateField = Field(default_factory=Gate)
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


class PlanSpec(_Model):
    """A campaign planned on paper (``harness check``): the verifier as it ships (its
    ``config.json``, no weights), or, without one, the verifier the spec's
    ``eagle3.build_verifier`` stage builds; and the GPUs it would run on."""

    verifier_config: StrictStr | None = None   # relative to the spec file
    gpus: StrictInt = Field(8, ge=1)
    gpu_memory: list[StrictStr | StrictInt] = Field(default_factory=lambda: ["141GB"])
    #: the GPU's model (``H100``, ``H200``): its bf16 peak and bandwidth time the stages
    gpu: StrictStr | None = None


class Pipeline(_Model):
    pipeline: StrictStr
    hosts: dict[str, HostSpec] = Field(default_factory=dict)
    defaults: Defaults = Field(default_factory=Defaults)
    stages: list[Stage] = Field(min_length=1)
    plan: PlanSpec | None = None

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
