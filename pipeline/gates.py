"""A stage's gate as typed values, read from its ``gate:`` mapping once.

``gate: {min_acceptance_length: 2.0, min_served_speedup: [{at: 1, min: 1.3}], ...}`` becomes
a :class:`Gate`: one :class:`Threshold` per ``min_x``/``max_x``/bare name, one
:class:`ServedSpeedup` per level of ``min_served_speedup``, a :class:`TauGap` for
``max_served_tau_gap`` (those two are defined beside their keys, in
:mod:`pipeline.served_gates`) and a :class:`RequireVllm` for ``require_vllm``. A spec's
stage is read with its gate read here (``Stage.gate``, by :func:`read_gate`), and the spec
loader refuses any entry of the wrong form where it is; everything after it (the runner,
the verification rows, the TUI) judges these values and never parses a form again.

A verification row stores :meth:`Gate.to_json`, the mapping as the stage wrote it, so rows
from before these types read the same; :meth:`Gate.from_json` reads a stored one back.
Reading never raises: an entry of the wrong form (a hand-made row) is an
:class:`Unreadable` value, which the loader refuses and a judgement fails by name.

Standard library only, like :mod:`pipeline.actions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pipeline.actions import REQUIRE_VLLM, TABLE_CHECKS, gate_metric
from pipeline.served_gates import (
    SERVED_SPEEDUP,
    TAU_GAP,
    GateFormError,
    ServedSpeedup,
    TauGap,
    served_levels,
    tau_gap_form,
)

__all__ = ["Gate", "GateValue", "RequireVllm", "ServedSpeedup", "TauGap", "Threshold",
           "Unreadable", "parse_gate", "read_gate"]


@dataclass(frozen=True)
class Threshold:
    """``min_x: t`` holds metric ``x >= t``, ``max_x`` ``<=``; a bare name is ``min``.
    ``limit`` a tuple: a list metric held position by position."""

    key: str
    metric: str
    op: str
    limit: float | tuple[float, ...]

    def form(self) -> Any:
        return list(self.limit) if isinstance(self.limit, tuple) else self.limit


@dataclass(frozen=True)
class RequireVllm:
    """``require_vllm: true``: no vLLM check may be answered from the table of known rules."""

    required: bool
    key: ClassVar[str] = REQUIRE_VLLM

    def form(self) -> Any:
        return self.required


@dataclass(frozen=True)
class Unreadable:
    """A gate entry of the wrong form: ``problem`` is the one-line reason, ``index`` the
    list entry it is in; ``metric``/``op`` what the key would hold, for the line that
    fails it."""

    key: str
    metric: str
    op: str
    raw: Any
    problem: str
    index: int | None = None

    def form(self) -> Any:
        return self.raw


GateValue = Threshold | RequireVllm | ServedSpeedup | TauGap | Unreadable


@dataclass(frozen=True)
class Gate:
    """A stage's gate: its values in the order the keys were written (a served speedup's
    levels one after another), which is the order they are judged and shown in."""

    values: tuple[GateValue, ...] = ()
    _keys: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_keys", tuple(dict.fromkeys(v.key for v in self.values)))

    def __bool__(self) -> bool:
        return bool(self.values)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys as written, each once, in order."""
        return self._keys

    def of(self, key: str) -> tuple[GateValue, ...]:
        return tuple(v for v in self.values if v.key == key)

    @property
    def served_speedups(self) -> tuple[ServedSpeedup, ...]:
        return tuple(v for v in self.values if isinstance(v, ServedSpeedup))

    @property
    def tau_gap(self) -> TauGap | None:
        return next((v for v in self.values if isinstance(v, TauGap)), None)

    def problem(self, key: str) -> Unreadable | None:
        """The entry of ``key`` when it is of the wrong form."""
        return next((v for v in self.of(key) if isinstance(v, Unreadable)), None)

    def adding(self, value: GateValue) -> Gate:
        """This gate and ``value`` after it (a benchmark's implied τ comparison)."""
        return Gate((*[v for v in self.values if v.key != value.key], value))

    def to_json(self) -> dict[str, Any]:
        """The mapping as written (numbers as floats): what a verification row stores."""
        out: dict[str, Any] = {}
        for key in self._keys:
            values = self.of(key)
            first = values[0]
            if isinstance(first, ServedSpeedup):
                forms = [v.form() for v in values]
                out[key] = forms if first.listed or len(forms) > 1 else forms[0]
            else:
                out[key] = first.form()
        return out

    @classmethod
    def from_json(cls, stored: Mapping[str, Any] | None) -> Gate:
        """A stored row's gate (read once, where a row is read); never raises."""
        return read_gate(stored or {})


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _entry(key: str, value: Any) -> tuple[GateValue, ...]:
    if key == REQUIRE_VLLM:
        if isinstance(value, bool):
            return (RequireVllm(value),)
        return (Unreadable(key, TABLE_CHECKS, "<=", value,
                           f"expected true or false, got {value!r}"),)
    if key == SERVED_SPEEDUP:
        try:
            levels = served_levels(value)
        except GateFormError as exc:
            return (Unreadable(key, "served_speedup", ">=", value, str(exc), exc.index),)
        return tuple(ServedSpeedup(at, least, isinstance(value, list)) for at, least in levels)
    if key == TAU_GAP:
        try:
            tolerance, stage = tau_gap_form(value)
        except GateFormError as exc:
            return (Unreadable(key, "served_tau_gap", "<=", value, str(exc), exc.index),)
        return (TauGap(tolerance, stage, isinstance(value, dict)),)
    metric, op = gate_metric(key)
    if _number(value):
        return (Threshold(key, metric, op, float(value)),)
    if isinstance(value, list) and value and all(_number(v) for v in value):
        return (Threshold(key, metric, op, tuple(float(v) for v in value)),)
    return (Unreadable(key, metric, op, value,
                       f"expected a number or a list of numbers, got {value!r}"),)


def read_gate(mapping: Mapping[str, Any]) -> Gate:
    """A ``gate:`` mapping as typed values; an entry of the wrong form is kept as an
    :class:`Unreadable` (see :meth:`Gate.problem`), never raised."""
    return Gate(tuple(v for key, value in mapping.items() for v in _entry(str(key), value)))


def parse_gate(mapping: Mapping[str, Any]) -> Gate:
    """Like :func:`read_gate`, but the first entry of the wrong form raises
    :class:`GateFormError` naming its key (and list entry)."""
    gate = read_gate(mapping)
    bad = next((v for v in gate.values if isinstance(v, Unreadable)), None)
    if bad is not None:
        raise GateFormError(bad.problem, bad.index, key=bad.key)
    return gate
