"""Series a job records: one line in its log per point, which the runner stores.

Any stage, ours or a person's own script, records a point by printing one line:

    @series {"metric": "loss", "axis": "step", "x": 250, "y": 2.31}

``@series`` and a space at the start of a line, then a JSON object with:

``metric``  (required) the name of what is measured: a letter, then letters, digits or
            ``_ . - / :``, at most 64 characters (``loss``, ``tokens_per_s``, ``tau``)
``x``       (required) where on the axis: a number (a step, an epoch, a concurrency) or a
            name of at most 64 characters (a checkpoint: ``untrained``, ``epoch-001``)
``y``       (required) the value: a number, or ``null`` for one that is not finite
``axis``    what ``x`` counts (default ``step``), named as ``metric`` is: ``step``,
            ``epoch``, ``checkpoint``, ``concurrency``, ``position``, ...
``labels``  an object of at most 8 names to short strings or numbers that tell the lines of
            one metric apart: ``{"position": 1}``, ``{"server": "speculative"}``
``spread``  ``[min, max]`` of the trials behind ``y`` (drawn as a band)

One point per line, at most 4096 bytes. A line the runner cannot read is skipped and said
once on the runner's terminal; nothing else about the job changes. The runner reads the
lines from the log as it streams, so it works wherever jobs run (locally, over SSH, on
Slurm) and needs nothing else on the host.

:func:`emit` prints such a line from Python (standard library only, as stage code must
be); :func:`parse` reads one back (the runner's side). Our stages emit only inside a
harness job (``HARNESS_RUN_ID`` set) or when ``HARNESS_SERIES=1``, so running a stage by
hand prints no lines meant for a machine.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

PREFIX = "@series "
MAX_LINE = 4096
MAX_LABELS = 8
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/:]{0,63}")
MAX_TEXT = 64
_KEYS = frozenset({"metric", "axis", "x", "y", "labels", "spread"})

Label = str | int | float


@dataclass(frozen=True)
class Point:
    """One ``@series`` line, read."""

    metric: str
    x: int | float | str
    y: float | None
    axis: str = "step"
    labels: Mapping[str, Label] = field(default_factory=dict)
    spread: tuple[float, float] | None = None


class BadLine(ValueError):
    """A line that starts with ``@series`` but is not a point; the message says why."""


def enabled() -> bool:
    """Whether our stages print their series: inside a harness job, or when asked."""
    if os.environ.get("HARNESS_SERIES") is not None:
        return os.environ["HARNESS_SERIES"] not in ("", "0")
    return bool(os.environ.get("HARNESS_RUN_ID"))


def _number(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def line(metric: str, x: int | float | str, y: float | None, *, axis: str = "step",
         labels: Mapping[str, Label] | None = None,
         spread: Sequence[float] | None = None) -> str:
    """The ``@series`` line for one point (no newline). Non-finite values become null."""
    data: dict[str, Any] = {"metric": metric, "axis": axis, "x": x, "y": _number(y)}
    if labels:
        data["labels"] = dict(labels)
    if spread is not None:
        data["spread"] = [_number(spread[0]), _number(spread[1])]
    return PREFIX + json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def emit(metric: str, x: int | float | str, y: float | None, *, axis: str = "step",
         labels: Mapping[str, Label] | None = None, spread: Sequence[float] | None = None,
         out: TextIO | None = None) -> None:
    """Print one point for the runner to store (only when :func:`enabled`). One write, so
    a line is never split by another thread's output."""
    if not enabled():
        return
    stream = out or sys.stdout
    stream.write(line(metric, x, y, axis=axis, labels=labels, spread=spread) + "\n")
    stream.flush()


def is_series(text: str) -> bool:
    """Whether a log line is meant as a point (so a person's view can leave it out)."""
    return _strip(text).startswith(PREFIX)


def _strip(text: str) -> str:
    # A progress bar may have drawn on this line before (``\r``): only its last state counts.
    return text.rsplit("\r", 1)[-1].strip()


def parse(text: str) -> Point | None:
    """The point on a log line; None when the line is not meant as one; :class:`BadLine`
    (naming the problem) when it is but cannot be read."""
    text = _strip(text)
    if not text.startswith(PREFIX):
        return None
    if len(text.encode()) > MAX_LINE:
        raise BadLine(f"longer than {MAX_LINE} bytes")
    try:
        data = json.loads(text[len(PREFIX):])
    except ValueError as exc:
        raise BadLine(f"not JSON after {PREFIX.strip()} ({exc})") from None
    if not isinstance(data, dict):
        raise BadLine("not a JSON object after @series")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise BadLine(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    for key in ("metric", "x", "y"):
        if key not in data:
            raise BadLine(f"no {key!r}")
    metric = _name(data["metric"], "metric")
    axis = _name(data.get("axis", "step"), "axis")
    x = data["x"]
    if isinstance(x, str):
        _text(x, "x")
    elif not _is_number(x) or not math.isfinite(x):
        raise BadLine("'x' must be a finite number or a name")
    y = data["y"]
    if y is not None and not _is_number(y):
        raise BadLine("'y' must be a number or null")
    labels = data.get("labels") or {}
    if not isinstance(labels, dict) or len(labels) > MAX_LABELS:
        raise BadLine(f"'labels' must be an object of at most {MAX_LABELS} entries")
    for k, v in labels.items():
        _name(k, "a label's name")
        if isinstance(v, str):
            _text(v, f"label {k!r}")
        elif not _is_number(v) or not math.isfinite(v):
            raise BadLine(f"label {k!r} must be a short string or a finite number")
    spread = data.get("spread")
    if spread is not None:
        if not (isinstance(spread, list) and len(spread) == 2
                and all(v is None or _is_number(v) for v in spread)):
            raise BadLine("'spread' must be [min, max]")
        spread = (_number(spread[0]), _number(spread[1]))
    return Point(metric=metric, x=x, y=_number(y), axis=axis, labels=labels,
                 spread=spread)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise BadLine(f"{what} must be a name (a letter, then letters, digits or _.-/:, "
                      f"at most 64), got {json.dumps(value)[:40]}")
    return value


def _text(value: str, what: str) -> None:
    if not value or len(value) > MAX_TEXT or any(ord(c) < 32 or ord(c) == 127
                                                 for c in value):
        raise BadLine(f"{what} must be 1 to {MAX_TEXT} printable characters")


__all__ = ["MAX_LINE", "PREFIX", "BadLine", "Point", "emit", "enabled", "is_series", "line",
           "parse"]
