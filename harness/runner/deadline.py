"""Time limits of stages: how long each may run, and a warning when it will not make it.

A stage's limit is ``harness run --timeout STAGE=DURATION`` if given, else its spec
``timeout`` (or ``defaults.timeout``) times the timeout scale (``--timeout-scale``, else
``defaults.timeout_scale``). It counts from the run's start, so a runner that re-attaches
(after Ctrl-C, with a longer ``--timeout``) measures the same job, not a fresh one.

Built-in actions print progress lines that end in ``eta Ns`` (``pipeline.eagle3.common.
Progress``). When one says the stage needs longer than its limit leaves, the runner warns
at once, with the command that gives it more time, instead of cancelling it without a word
minutes later.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime

from pipeline.spec.durations import format_duration
from pipeline.spec.models import Pipeline, Stage
from state.fold import RunState
from state.store import utcnow

ETA = re.compile(r"\beta (\d+(?:\.\d+)?)s\b")
MARGIN = 1.5  # suggested limit: what the ETA says is needed, and half as much again


def stage_timeout(spec: Pipeline, stage: Stage, overrides: Mapping[str, float | None],
                  scale: float | None) -> float | None:
    """Seconds ``stage`` may run (None: no limit)."""
    if stage.name in overrides:
        return overrides[stage.name]
    base = stage.timeout if stage.timeout is not None else spec.defaults.timeout
    if base is None:
        return None
    factor = stage_scale(spec, stage, overrides, scale)
    assert factor is not None  # only a --timeout has none, and it was returned above
    return base * factor


def stage_scale(spec: Pipeline, stage: Stage, overrides: Mapping[str, float | None],
                scale: float | None) -> float | None:
    """The timeout scale ``stage``'s limit comes from (None: given outright by
    ``--timeout``): ``--timeout-scale``, else the spec's ``defaults.timeout_scale``."""
    if stage.name in overrides:
        return None
    return scale if scale is not None else spec.defaults.timeout_scale


def duration(run: RunState) -> float | None:
    """Seconds from the run's start to its end (or to now, while it runs)."""
    if not run.started_at:
        return None
    end = run.ended_at or utcnow()
    return (_when(end) - _when(run.started_at)).total_seconds()


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def suggest_limit(elapsed: float, eta: float) -> str:
    """A limit that leaves room for what the ETA says, rounded up to 5 minutes."""
    need = (elapsed + eta) * MARGIN
    return format_duration(max(300, math.ceil(need / 300) * 300))


class EtaWatch:
    """Reads one job's log as it streams and says, once, when its own ETA passes the time
    its limit leaves."""

    def __init__(self, stage: str, timeout: float | None, rerun: str,
                 scale: float | None = None):
        self.stage = stage
        self.timeout = timeout
        self.rerun = rerun
        #: the timeout scale the limit came from (None: an explicit --timeout)
        self.scale = scale
        self.last_eta: float | None = None
        self.warned = False
        self._over = 0  # progress lines in a row whose ETA passed the time left
        self._partial = ""

    def see(self, text: str, elapsed: float) -> str | None:
        """The warning to give now, if any, for log ``text`` read ``elapsed`` s into the run."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()[-400:]  # a line still being written
        etas = [float(m.group(1)) for line in lines for m in ETA.finditer(line)]
        if not etas:
            return None
        self.last_eta = etas[-1]
        if self.timeout is None or self.warned:
            return None
        left = self.timeout - elapsed
        if self.last_eta <= left:
            self._over = 0
            return None
        # The first estimates of a loop are the noisiest (warm-up): two in a row must say so.
        self._over += 1
        if self._over < 2:
            return None
        self.warned = True
        every = ""
        if self.scale is not None:
            need = (elapsed + self.last_eta) * MARGIN / self.timeout * self.scale
            every = f" (`--timeout-scale {math.ceil(need)}` gives every stage more)"
        return (f"its progress says eta {self.last_eta:.0f}s, but its timeout "
                f"({format_duration(self.timeout)}) leaves {max(left, 0):.0f}s: it will be "
                f"cancelled then. For more time, Ctrl-C (the job keeps running) and "
                f"`{self.more_time(elapsed)}` re-attaches to it with a longer limit{every}")

    def more_time(self, elapsed: float) -> str:
        # no ETA: the stage needs at least what it had, so offer it twice as much again
        eta = self.last_eta if self.last_eta is not None else elapsed
        return f"{self.rerun} --timeout {self.stage}={suggest_limit(elapsed, eta)}"

    def timed_out(self, elapsed: float) -> str:
        """What to add to a timeout's reason."""
        said = f"; its last progress said eta {self.last_eta:.0f}s" \
            if self.last_eta is not None else ""
        return f"{said} (to give it more time: `{self.more_time(elapsed)} --retry-blocked`)"
