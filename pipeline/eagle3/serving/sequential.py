"""The order of a served benchmark's runs, and when a level has enough of them.

:func:`measure` walks the concurrencies one after another. At each it runs trials: every
server once per trial, in ABBA order (:func:`pipeline.eagle3.serving.trials.trial_order`).
After ``trials`` trials (made even, so the blocks are whole) it looks at every candidate's
interval after each further block, and stops the level once all are within ``ci_width``
(``settled``), once ``max_trials`` were run, or once ``level_budget`` seconds of the level
have passed (``budget``). ``trials: 1`` runs each level once (``one trial``).

``extra_budget`` pools time across levels. A level that settles early leaves the rest of
its budget unused, and a wide one stops at its own; so after the pass over the levels,
``extra_budget`` more seconds go to the levels that stopped wide, one ABBA block at a
time, to the one nearest to settling first (the fewest further trials at its present
spread), until every level has settled or reached ``max_trials``, or the time is spent.
On the 3.1B example (H100) c=1 settled in 4 trials and 34 s while c=16 needed about 30:
a budget per level either starves c=16 or wastes most of c=1's.

The runs themselves are the caller's (``run``: one server at one concurrency in one trial,
a :class:`Level`), so the order and the stopping rule are the same for real servers and
for the scripted trials of the tests. Standard library only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.eagle3.serving.load_levels import Level
from pipeline.eagle3.serving.trials import (
    BASELINE,
    DEFAULT_CI_WIDTH,
    DEFAULT_CONFIDENCE,
    LevelVerdict,
    trial_order,
    verdicts,
)

__all__ = ["BUDGET", "MAX_TRIALS", "NO_BASELINE", "ONE_TRIAL", "SETTLED", "Rule",
           "least_trials", "measure", "trials_to_settle"]

SETTLED, BUDGET, MAX_TRIALS, ONE_TRIAL = "settled", "budget", "max_trials", "one trial"
NO_BASELINE = "no baseline"  # nothing to pair with: the least trials, then the next level


class Named(Protocol):
    @property
    def role(self) -> str: ...


@dataclass(frozen=True)
class Rule:
    """How many trials a level takes."""

    trials: int = 4
    max_trials: int = 16
    ci_width: float = DEFAULT_CI_WIDTH
    confidence: float = DEFAULT_CONFIDENCE
    level_budget: float = 120.0
    extra_budget: float = 0.0   # seconds after the pass, for the levels still wide


def least_trials(trials: int) -> int:
    """The trials a level takes at least: ``trials``, made even (whole ABBA blocks)."""
    return trials if trials == 1 else trials + trials % 2


def _stop(rule: Rule, found: Sequence[LevelVerdict], trial: int, elapsed: float,
          paired: bool) -> str | None:
    if rule.trials == 1:
        return ONE_TRIAL
    if trial < least_trials(rule.trials) or trial % 2:
        return None
    if not paired:
        return NO_BASELINE
    if found and all(v.settled for v in found):
        return SETTLED
    if trial >= rule.max_trials:
        return MAX_TRIALS
    if elapsed >= rule.level_budget:
        return BUDGET
    return None


def _progress(c: int, trial: int, elapsed: float, found: Sequence[LevelVerdict],
              why: str | None, rule: Rule, extra: bool = False) -> str:
    parts = []
    for v in found:
        ci = v.interval
        if ci.low is not None and ci.high is not None and ci.estimate is not None:
            parts.append(f"{v.candidate} {ci.estimate:.3f}x ({ci.low:.3f}-{ci.high:.3f}, "
                         f"+-{ci.half_width:.1%})")
    tail = {None: "more trials", SETTLED: "settled",
            MAX_TRIALS: f"max_trials ({rule.max_trials}) reached",
            BUDGET: f"the level's budget ({rule.level_budget:g} s) is spent"}[why]
    when = (f"{elapsed:.0f} s of the extra {rule.extra_budget:g}" if extra else
            f"{elapsed:.0f} s")
    return f"[c={c}] after {trial} trials ({when}): {', '.join(parts) or '-'}; {tail}"


def measure(servers: Sequence[Named], concurrency: Sequence[int], rule: Rule,
            run: Callable[[Named, int, int], Level], levels: list[Level],
            prompt_ids: list[str], *, clock: Callable[[], float] = time.monotonic,
            out: Callable[[str], None] = print) -> dict[int, str]:
    """Run every level by ``rule``; each run is appended to ``levels`` as it ends (so an
    interruption keeps them). Returns why each level took no more trials."""
    stops: dict[int, str] = {}
    done: dict[int, int] = {}  # trials run per level
    latest: dict[int, list[LevelVerdict]] = {}  # each level's verdicts after its last block
    candidates = [s.role for s in servers if s.role != BASELINE]
    paired = any(s.role == BASELINE for s in servers)

    def block(c: int, trial: int) -> list[LevelVerdict]:
        for server in trial_order(servers, trial):
            levels.append(run(server, c, trial))
        done[c] = trial
        if rule.trials == 1 or trial < least_trials(rule.trials) or trial % 2:
            return []
        here = [lv for lv in levels if lv.concurrency == c]
        latest[c] = [v for name in candidates if (v := verdicts(
            here, name, prompt_ids, ci_width=rule.ci_width,
            confidence=rule.confidence).get(c)) is not None]
        return latest[c]

    for c in concurrency:
        began, trial = clock(), 0
        while c not in stops:
            trial += 1
            found = block(c, trial)
            elapsed = clock() - began
            why = _stop(rule, found, trial, elapsed, paired)
            if found:
                out(_progress(c, trial, elapsed, found, why, rule))
            if why is not None:
                stops[c] = why
    if rule.extra_budget > 0 and rule.trials > 1 and paired:
        _spend_extra(rule, stops, done, latest, block, clock, out)
    return stops


def trials_to_settle(found: Sequence[LevelVerdict], width: float) -> float:
    """Further trials the widest candidate needs at its present spread: the half-width
    falls as one over the root of the trials, so ``n * (half / width)^2 - n``; no
    interval yet: unknown, last in line."""
    if not found:
        return math.inf
    need = 0.0
    for v in found:
        ci = v.interval
        if ci.half_width is None or not ci.n:
            return math.inf
        need = max(need, ci.n * (ci.half_width / width) ** 2 - ci.n)
    return need


def _spend_extra(rule: Rule, stops: dict[int, str], done: dict[int, int],
                 latest: dict[int, list[LevelVerdict]],
                 block: Callable[[int, int], list[LevelVerdict]],
                 clock: Callable[[], float], out: Callable[[str], None]) -> None:
    began = clock()
    while clock() - began < rule.extra_budget:
        wide = [c for c, why in stops.items() if why == BUDGET and done[c] < rule.max_trials]
        if not wide:
            return
        c = min(wide, key=lambda k: trials_to_settle(latest.get(k, []), rule.ci_width))
        block(c, done[c] + 1)
        found = block(c, done[c] + 1)  # a whole ABBA block: two trials
        spent = clock() - began
        why = (SETTLED if found and all(v.settled for v in found) else
               MAX_TRIALS if done[c] >= rule.max_trials else None)
        out(_progress(c, done[c], spent, found, why, rule, extra=True))
        if why is not None:
            stops[c] = why
