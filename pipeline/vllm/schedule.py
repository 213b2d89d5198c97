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

**Which schedules the engine starts** (:func:`capture_problem`). vLLM 0.26's V2 model
runner (its default for a dense target with EAGLE-3) builds the CUDA graphs of the drafter's
one-token decode steps from the schedule too, for a query of ``k - K + 1`` tokens a request
(``K = num_speculative_tokens``; ``vllm/v1/worker/gpu/cudagraph_utils.py``,
``_init_candidates``). A k below K gives a query of 0 tokens (a ``ZeroDivisionError`` at
start) or fewer (capture dies in ``assert 0 < num_reqs <= num_tokens``,
``vllm/v1/worker/gpu/input_batch.py``; vLLM issue 48494). So with the default full CUDA
graphs only a schedule whose every k is K starts: one k for every batch size. It holds
whichever way k moves (rising, falling, a range of 0). The drafter's decode steps are not
captured in full when the server runs piecewise graphs (``--compilation-config
'{"cudagraph_mode": "PIECEWISE"}'``), eagerly (``--enforce-eager``) or on the V1 runner
(``VLLM_USE_V2_MODEL_RUNNER=0``, which switches the whole server to piecewise graphs itself
and says so: :data:`PIECEWISE_OVERRIDE`); then any schedule that :func:`check` passes
starts. :func:`graphs_of` reads which of those a serve stage's command line asks for.

:func:`from_sweep` turns a sweep (each candidate's measured k and its speedup over plain
at each concurrency) into the best schedule the engine will start: with full graphs the
one k whose speedups over the levels are best together (their geometric mean), naming
every level that gave up a faster k; with piecewise graphs at each level the fastest k, or
0 where no k beat plain, a level's range reaching halfway (geometrically) to the next level
and equal neighbours merging.

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

__all__ = ["FULL", "KEY", "PIECEWISE", "PIECEWISE_OVERRIDE", "Choice", "ScheduleError",
           "best_fixed", "capture_problem", "check", "fallback_k", "from_sweep", "graphs_of",
           "k_at", "load", "needed_k", "write"]

KEY = "num_speculative_tokens_per_batch_size"
# vLLM's warning when it switches to piecewise CUDA graphs for a schedule (V1 runner)
PIECEWISE_OVERRIDE = re.compile(r"Overriding cudagraph_mode from (\w+) to PIECEWISE")
# the last range of a schedule made from a sweep ends here; larger batches take its k
LAST_END = 1024

# how the server's CUDA graphs capture the drafter's decode steps (see the module's words)
FULL, PIECEWISE = "full", "piecewise"
GRAPHS = (FULL, PIECEWISE)

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


def capture_problem(schedule: Schedule, k: int | None = None, graphs: str = FULL
                    ) -> str | None:
    """Why a server with ``graphs`` and ``num_speculative_tokens`` ``k`` (default: the
    schedule's largest) cannot start ``schedule`` (None: it can): with full graphs, any
    entry's k below that (vLLM 0.26's capture of the drafter's decode steps)."""
    if graphs != FULL:
        return None
    top = needed_k(schedule) if k is None else k
    low = next(((s, e, k) for s, e, k in schedule if k < top), None)
    if low is None:
        return None
    start, end, low_k = low
    return (f"k={low_k} at batch sizes {start}-{end} is below num_speculative_tokens {top}: "
            "vLLM 0.26's default (V2) runner captures the drafter's decode steps for a query "
            f"of k - {top} + 1 = {low_k - top + 1} tokens and dies at start (vLLM issue "
            "48494); with full CUDA graphs a schedule must keep one k for every batch size")


def graphs_of(extra_args: list[str], env: Mapping[str, Any]) -> str:
    """:data:`PIECEWISE` when a ``vllm serve`` command line (its extra arguments and the
    server's environment) keeps the drafter's decode steps out of full CUDA graphs; else
    :data:`FULL` (vLLM's default)."""
    if str(env.get("VLLM_USE_V2_MODEL_RUNNER", "")).strip() in ("0", "false", "False"):
        return PIECEWISE
    args = [str(a) for a in extra_args]
    if "--enforce-eager" in args or "-O0" in args:
        return PIECEWISE
    for i, arg in enumerate(args):
        text = arg.partition("=")[2] if arg.startswith("--compilation-config=") else (
            args[i + 1] if arg in ("--compilation-config", "-cc") and i + 1 < len(args)
            else None)
        if text is None:
            continue
        try:
            mode = json.loads(text).get("cudagraph_mode")
        except (ValueError, AttributeError):
            continue
        if str(mode).upper() in ("PIECEWISE", "NONE"):
            return PIECEWISE
    return FULL


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
    candidate: str | None         # the candidate of that k (None: none measured)
    speedup: float | None         # its speedup there
    by_k: dict[int, float]        # every measured k's speedup
    best_k: int | None = None     # the level's fastest k, when the schedule could not keep it

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "k": self.k, "candidate": self.candidate,
                "speedup": self.speedup, "by_k": {str(k): v for k, v in self.by_k.items()},
                "gave_up": None if self.best_k is None else {
                    "k": self.best_k, "speedup": self.by_k.get(self.best_k)}}


def _by_k(speedups: Mapping[int, Mapping[str, float | None]], ks: Mapping[str, int]
          ) -> dict[int, dict[int, tuple[float, str]]]:
    """Per level, each measured k's speedup and the candidate that measured it (the faster
    one where two candidates drafted the same k)."""
    out: dict[int, dict[int, tuple[float, str]]] = {}
    for c in sorted(speedups):
        row: dict[int, tuple[float, str]] = {}
        for name, value in speedups[c].items():
            if value is None or name not in ks:
                continue
            k = ks[name]
            if k not in row or value > row[k][0]:
                row[k] = (float(value), name)
        out[c] = row
    return out


def best_fixed(speedups: Mapping[int, Mapping[str, float | None]], ks: Mapping[str, int]
               ) -> int | None:
    """The one k that does best over every level together: the highest geometric mean of
    its speedups, over the levels where every k was measured (None: no k measured)."""
    table = _by_k(speedups, ks)
    seen: dict[int, list[float]] = {}
    for row in table.values():
        for k, (value, _name) in row.items():
            seen.setdefault(k, []).append(math.log(value))
    if not seen:
        return None
    most = max(len(v) for v in seen.values())  # a k measured at every level, if any
    scores = {k: sum(v) / len(v) for k, v in seen.items() if len(v) == most}
    return max(sorted(scores), key=lambda k: scores[k])


def from_sweep(speedups: Mapping[int, Mapping[str, float | None]],
               ks: Mapping[str, int], *, margin: float = 0.0, graphs: str = FULL,
               last_end: int = LAST_END) -> tuple[Schedule, list[Choice]]:
    """``speedups[c][candidate]`` (each candidate's estimate) and each candidate's k -> the
    best schedule a server with ``graphs`` starts, and what was chosen per level. With
    piecewise graphs a k is used where it beat plain by more than ``margin`` (1.0 +
    margin), 0 elsewhere; with full graphs the one best k serves every level."""
    levels = sorted(speedups)
    if not levels:
        raise ScheduleError("the sweep measured no level")
    if graphs not in GRAPHS:
        raise ScheduleError(f"graphs must be one of {', '.join(GRAPHS)}, got {graphs!r}")
    table = _by_k(speedups, ks)
    fastest: dict[int, tuple[int, float, str] | None] = {}
    for c in levels:
        row = table[c]
        if not row:
            fastest[c] = None
            continue
        k, (value, name) = max(row.items(), key=lambda kv: kv[1][0])
        fastest[c] = (k if value > 1.0 + margin else 0, value, name)
    if graphs == FULL:
        k = best_fixed(speedups, ks)
        if k is None:
            raise ScheduleError("the sweep measured no candidate's k")
        choices = []
        for c in levels:
            row, best = table[c], fastest[c]
            value, name = row.get(k, (None, None))
            gave_up = best[0] if best is not None and best[0] != k else None
            choices.append(Choice(c, k, name, None if value is None else round(value, 4),
                                  {kk: round(v, 4) for kk, (v, _n) in row.items()}, gave_up))
        return check([[1, max(last_end, levels[-1]), k]]), choices
    choices = []
    for c in levels:
        row, best = table[c], fastest[c]
        by = {kk: round(v, 4) for kk, (v, _n) in row.items()}
        if best is None:
            choices.append(Choice(c, 0, None, None, by))
        else:
            choices.append(Choice(c, best[0], best[2], round(best[1], 4), by))
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
    it with, what each level chose and why, and ``best_fixed_k`` (what ``eagle3.serve``
    falls back to when a server cannot start the schedule)."""
    doc = {KEY: [list(e) for e in schedule], "num_speculative_tokens": needed_k(schedule),
           "levels": [c.to_json() for c in choices],
           "rule": "per level the fastest k (0 where none beat plain), a level's batch sizes "
                   "reaching the geometric midpoint to the next; with full CUDA graphs the "
                   "one k best over every level (the geometric mean of its speedups), since "
                   "vLLM 0.26 starts no schedule with a k below its largest",
           **(extra or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def fallback_k(text: str, base: Path | None = None) -> int | None:
    """The ``best_fixed_k`` a sweep's file records (None: an inline schedule, or a file
    without one)."""
    if text.lstrip().startswith("["):
        return None
    path = Path(text)
    if base is not None and not path.is_absolute():
        path = base / path
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    k = doc.get("best_fixed_k") if isinstance(doc, dict) else None
    return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None
