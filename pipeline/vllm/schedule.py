"""vLLM's dynamic speculation: ``num_speculative_tokens_per_batch_size``, checked, chosen
from a sweep over k, and read back from the sweep's file.

vLLM 0.26 takes, inside ``--speculative-config``, a list of ``[start, end, k]`` entries:
batch sizes ``start..end`` (inclusive) draft ``k`` tokens a step, and ``k = 0`` turns
speculation off for that range (``vllm/config/speculative.py``; the scheduler expands it
into a lookup per batch size, ``vllm/v1/spec_decode/dynamic/utils.py``). Its rules, which
:func:`check` applies before any GPU time is spent: entries of three integers, positive
ranges with ``start <= end``, ``k >= 0``, ranges that do not overlap, and the first one
starting at 1. A batch between two ranges takes the k of the range before it, and one past
the last range the last k. Each k is capped at ``num_speculative_tokens``, so that must be
at least the largest k (:func:`needed_k`; at least 1 even where every k is 0, since vLLM
refuses a zero maximum).

What the engine does with it: the V2 model runner (vLLM 0.26's default for a dense model
with EAGLE-3) captures CUDA graphs for every k of the schedule; on the V1 runner vLLM
switches ``cudagraph_mode`` to ``PIECEWISE`` itself and says so in its log
(:data:`PIECEWISE_OVERRIDE`). Nothing needs to be set on the command line for either.

:func:`from_sweep` turns a sweep (each candidate's measured k and its speedup over plain
at each concurrency) into a schedule: at each level the k whose smallest trial was
fastest, or 0 where no k beat plain; a level's range reaches halfway (geometrically) to the
next level, and equal neighbours merge.

Standard library only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

__all__ = ["KEY", "PIECEWISE_OVERRIDE", "Choice", "ScheduleError", "check", "from_sweep",
           "k_at", "load", "needed_k", "write"]

KEY = "num_speculative_tokens_per_batch_size"
# vLLM's warning when it switches to piecewise CUDA graphs for a schedule (V1 runner)
PIECEWISE_OVERRIDE = re.compile(r"Overriding cudagraph_mode from (\w+) to PIECEWISE")
# the last range of a schedule made from a sweep ends here; larger batches take its k
LAST_END = 1024

Schedule = list[tuple[int, int, int]]


class ScheduleError(ValueError):
    """A schedule vLLM would refuse, or a file that holds none."""


def _int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def check(value: Any) -> Schedule:
    """``[[1, 8, 3], [9, 64, 1], [65, 1024, 0]]`` -> sorted entries; :class:`ScheduleError`
    with the first problem, in the words of vLLM's rule."""
    if not isinstance(value, list) or not value:
        raise ScheduleError(f"{KEY} must be a non-empty list of [start, end, k] entries, "
                            f"got {value!r}")
    entries: Schedule = []
    for i, entry in enumerate(value):
        nums = [_int(x) for x in entry] if isinstance(entry, (list, tuple)) else []
        if len(nums) != 3 or any(n is None for n in nums):
            raise ScheduleError(f"entry {i} must be three integers [start, end, k], got "
                                f"{entry!r}")
        start, end, k = nums  # type: ignore[misc]
        if start <= 0 or end <= 0:  # type: ignore[operator]
            raise ScheduleError(f"entry {i}: batch sizes start at 1, got {entry!r}")
        if start > end:  # type: ignore[operator]
            raise ScheduleError(f"entry {i}: start {start} is after end {end}")
        if k < 0:  # type: ignore[operator]
            raise ScheduleError(f"entry {i}: k must be >= 0 (0 turns speculation off), "
                                f"got {k}")
        entries.append((start, end, k))  # type: ignore[arg-type]
    entries.sort()
    previous = 0
    for start, end, _k in entries:
        if start <= previous:
            raise ScheduleError(f"the range starting at {start} overlaps the one before "
                                f"it (which ends at {previous})")
        previous = end
    if entries[0][0] != 1:
        raise ScheduleError(f"the first range must start at batch size 1 (vLLM needs a k "
                            f"for every batch size), it starts at {entries[0][0]}")
    return entries


def needed_k(schedule: Schedule) -> int:
    """The ``num_speculative_tokens`` a schedule needs: its largest k, at least 1."""
    return max(1, max(k for _s, _e, k in schedule))


def k_at(schedule: Schedule, batch: int) -> int:
    """The k vLLM drafts at ``batch`` requests in a step (gaps take the range before)."""
    k = schedule[0][2]
    for start, _end, value in schedule:
        if start > batch:
            break
        k = value
    return k


def load(text: str, base: Path | None = None) -> Schedule:
    """A schedule from JSON text (``[[1, 8, 3], ...]``) or a file: a JSON list, or a sweep's
    file with the list under :data:`KEY`. Relative paths are read against ``base``."""
    if text.lstrip().startswith("["):
        try:
            return check(json.loads(text))
        except ValueError as exc:
            if isinstance(exc, ScheduleError):
                raise
            raise ScheduleError(f"not valid JSON: {text!r} ({exc})") from None
    path = Path(text)
    if base is not None and not path.is_absolute():
        path = base / path
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ScheduleError(f"cannot read the schedule file {path}: "
                            f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise ScheduleError(f"the schedule file {path} is not JSON ({exc})") from None
    value = doc.get(KEY) if isinstance(doc, dict) else doc
    if value is None:
        raise ScheduleError(f"the schedule file {path} has no {KEY!r}")
    try:
        return check(value)
    except ScheduleError as exc:
        raise ScheduleError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class Choice:
    """What a sweep chose at one concurrency."""

    concurrency: int
    k: int                        # 0: no k beat plain
    candidate: str | None         # the fastest candidate (None: none measured)
    speedup: float | None         # its speedup (the smallest trial's)
    by_k: dict[int, float]        # every measured k's speedup

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "k": self.k, "candidate": self.candidate,
                "speedup": self.speedup, "by_k": {str(k): v for k, v in self.by_k.items()}}


def from_sweep(speedups: Mapping[int, Mapping[str, float | None]],
               ks: Mapping[str, int], *, margin: float = 0.0,
               last_end: int = LAST_END) -> tuple[Schedule, list[Choice]]:
    """``speedups[c][candidate]`` (the conservative figure) and each candidate's k -> the
    schedule and what was chosen per level. A k is used where it beat plain by more than
    ``margin`` (1.0 + margin); elsewhere 0."""
    levels = sorted(speedups)
    if not levels:
        raise ScheduleError("the sweep measured no level")
    choices = []
    for c in levels:
        by_k: dict[int, float] = {}
        best: tuple[float, str] | None = None
        for name, value in speedups[c].items():
            if value is None or name not in ks:
                continue
            by_k[ks[name]] = round(value, 4)
            if best is None or value > best[0]:
                best = (value, name)
        if best is None:
            choices.append(Choice(c, 0, None, None, by_k))
            continue
        k = ks[best[1]] if best[0] > 1.0 + margin else 0
        choices.append(Choice(c, k, best[1], round(best[0], 4), by_k))
    bounds = [math.floor(math.sqrt(a * b)) for a, b in pairwise(levels)]
    schedule: Schedule = []
    start = 1
    for choice, end in zip(choices, [*bounds, max(last_end, levels[-1])], strict=True):
        end = max(end, start)
        if schedule and schedule[-1][2] == choice.k:
            schedule[-1] = (schedule[-1][0], end, choice.k)
        else:
            schedule.append((start, end, choice.k))
        start = end + 1
    return check([list(e) for e in schedule]), choices


def write(path: Path, schedule: Schedule, choices: Sequence[Choice],
          extra: Mapping[str, Any] | None = None) -> None:
    """The sweep's file: the schedule (``eagle3.serve`` reads it by path), the k to serve
    it with, and what each level chose and why."""
    doc = {KEY: [list(e) for e in schedule], "num_speculative_tokens": needed_k(schedule),
           "levels": [c.to_json() for c in choices],
           "rule": "per level the k whose smallest trial was fastest, 0 where none beat "
                   "plain; a level's batch sizes reach the geometric midpoint to the next",
           **(extra or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
