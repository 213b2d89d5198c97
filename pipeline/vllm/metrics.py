"""vLLM's ``/metrics`` (Prometheus text exposition) and the speculative-decoding figures in it.

vLLM exports four spec-decode counters (docs/serving.md, "eagle3.benchmark"; names and labels
checked against vLLM 0.33.0)::

    vllm:spec_decode_num_drafts_total{engine="0",model_name="m"}              drafts proposed
    vllm:spec_decode_num_draft_tokens_total{...}                              draft tokens proposed
    vllm:spec_decode_num_accepted_tokens_total{...}                           draft tokens accepted
    vllm:spec_decode_num_accepted_tokens_per_pos_total{...,position="i"}      accepted at position i

No gauge gives the acceptance figures; they come from the *deltas* of these counters
between two scrapes::

    acceptance rate        = accepted / draft tokens
    mean acceptance length = 1 + accepted / drafts
    acceptance at pos i    = accepted_per_pos[i] / drafts

What this module copes with, because real servers do it:

- the ``_total`` suffix: prometheus_client names a counter ``x`` and exposes ``x_total``
  (plus ``x_created``, ignored); either spelling is accepted;
- labels: one series per engine (data parallel), per model name, per position; series are
  summed over every label except ``position``, optionally after keeping one model name;
- resets: a counter that went down between scrapes was restarted (the server or one
  engine restarted), so its delta is its new value, and the reset is reported;
- missing counters: a server without speculation exports none of them, which is reported
  as such rather than as zero acceptance;
- OpenMetrics: when a scrape negotiates it (``Accept: application/openmetrics-text``),
  prometheus_client (0.26, vLLM 0.33's) escapes the colon in sample names, so
  ``vllm:spec_decode_num_drafts_total`` arrives as ``vllm_spec_decode_num_drafts_total``
  (its ``# HELP``/``# TYPE`` lines keep the colon); both spellings are read;
- aliases: ``--served-model-name a b`` serves one model under two names but labels its
  counters with the first only; :func:`spec_snapshot` takes every name of the model.

The parser is hand-written on purpose: stage code may import only the standard library
(prometheus_client's parser is not on a bare GPU image's client side). It accepts the
text format and OpenMetrics (``# EOF``, exemplars), skipping lines it cannot read and
saying which.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACCEPTED",
    "DRAFTS",
    "DRAFT_TOKENS",
    "PER_POSITION",
    "Sample",
    "SpecDelta",
    "SpecSnapshot",
    "parse_exposition",
    "spec_delta",
    "spec_snapshot",
]

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
COUNTERS = {"drafts": DRAFTS, "draft_tokens": DRAFT_TOKENS, "accepted": ACCEPTED,
            "per_position": PER_POSITION}

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'[\s,]*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_LABELS_END = re.compile(r"[\s,]*}")
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Labels
    value: float

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)


@dataclass
class Exposition:
    samples: list[Sample] = field(default_factory=list)
    #: ``(line number, text)`` of lines that could not be read; they are skipped.
    skipped: list[tuple[int, str]] = field(default_factory=list)


def _float(text: str) -> float:
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(text)  # "NaN" is fine for float()


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), value)


def _labels(line: str, pos: int) -> tuple[Labels, int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[pos] == "{"``; return labels and the end."""
    out: list[tuple[str, str]] = []
    pos += 1
    while True:
        end = _LABELS_END.match(line, pos)
        if end:
            return tuple(sorted(out)), end.end()
        m = _LABEL.match(line, pos)
        if not m:
            raise ValueError(f"bad label at column {pos + 1}")
        out.append((m.group(1), _unescape(m.group(2))))
        pos = m.end()


def parse_exposition(text: str, prefix: str | tuple[str, ...] = "") -> Exposition:
    """Every sample in a Prometheus/OpenMetrics text page whose name starts with
    ``prefix`` (or one of several); unreadable lines (of those) are listed."""
    result = Exposition()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or not line.startswith(prefix):
            continue
        try:
            m = _NAME.match(line)
            if not m:
                raise ValueError("no metric name")
            name, pos = m.group(0), m.end()
            labels: Labels = ()
            if pos < len(line) and line[pos] == "{":
                labels, pos = _labels(line, pos)
            rest = line[pos:].split("#", 1)[0].split()  # drop an OpenMetrics exemplar
            if not rest:
                raise ValueError("no value")
            result.samples.append(Sample(name, labels, _float(rest[0])))
        except ValueError as exc:
            result.skipped.append((number, f"{exc}: {raw[:120]}"))
    return result


def _series(samples: Iterable[Sample], base: str) -> dict[Labels, float]:
    """The counter ``base``'s series, spelled ``base_total`` or ``base``; ``_total`` wins."""
    plain: dict[Labels, float] = {}
    total: dict[Labels, float] = {}
    for s in samples:
        if s.name == base + "_total":
            total[s.labels] = s.value
        elif s.name == base:
            plain[s.labels] = s.value
    return {**plain, **total}


@dataclass(frozen=True)
class SpecSnapshot:
    """The spec-decode counters of one scrape, one mapping of series per counter."""

    series: Mapping[str, Mapping[Labels, float]]
    #: model names seen on the spec-decode series
    model_names: tuple[str, ...] = ()
    skipped: tuple[tuple[int, str], ...] = ()

    @property
    def present(self) -> bool:
        """Does the server export spec-decode counters at all (i.e. is it speculating)?"""
        return any(self.series.get(k) for k in ("drafts", "draft_tokens", "accepted"))

    @property
    def engines(self) -> tuple[str, ...]:
        found = {dict(lab).get("engine", "") for lab in self.series.get("drafts", {})}
        return tuple(sorted(found))


_SPEC = "vllm:spec_decode_"
_SPEC_ESCAPED = "vllm_spec_decode_"  # the OpenMetrics spelling


def spec_snapshot(text: str, model: str | Iterable[str] | None = None) -> SpecSnapshot:
    """The spec-decode counters in a ``/metrics`` page.

    ``model`` keeps only series whose ``model_name`` label is that name, or one of those
    names (a model's aliases: vLLM labels with the first ``--served-model-name``); series
    without the label are kept: older servers do not set it. Only spec-decode lines are
    parsed: a vLLM page is mostly histogram buckets, of no use here.
    """
    page = parse_exposition(text, prefix=(_SPEC, _SPEC_ESCAPED))
    samples = [s if s.name.startswith(_SPEC) else
               Sample(_SPEC + s.name[len(_SPEC_ESCAPED):], s.labels, s.value)
               for s in page.samples]
    names = sorted({s.label("model_name") or "" for s in samples} - {""})
    if model is not None:
        wanted = {model} if isinstance(model, str) else set(model)
        samples = [s for s in samples if s.label("model_name") in wanted | {None}]
    series = {key: _series(samples, base) for key, base in COUNTERS.items()}
    return SpecSnapshot(series=series, model_names=tuple(names), skipped=tuple(page.skipped))


@dataclass
class SpecDelta:
    """What happened between two scrapes, summed over engines and models."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    #: accepted tokens at draft position 0, 1, ... (missing positions are 0)
    per_position: list[float] = field(default_factory=list)
    #: series whose counter went down (restarted) or disappeared between the scrapes
    resets: list[str] = field(default_factory=list)
    present: bool = False

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def acceptance_length(self) -> float | None:
        return 1.0 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def acceptance_per_position(self) -> list[float]:
        if self.drafts <= 0:
            return []
        return [a / self.drafts for a in self.per_position]

    @property
    def tokens_per_draft(self) -> float | None:
        """Draft tokens proposed per draft: ``num_speculative_tokens`` when every step drafts."""
        return self.draft_tokens / self.drafts if self.drafts > 0 else None

    def problems(self) -> list[str]:
        """Inconsistencies no healthy server produces (each would skew the figures)."""
        out = []
        if self.accepted > self.draft_tokens + 1e-9:
            out.append(f"accepted tokens ({self.accepted:g}) exceed draft tokens "
                       f"({self.draft_tokens:g})")
        if self.per_position and abs(sum(self.per_position) - self.accepted) > 0.5:
            out.append(f"per-position accepted tokens sum to {sum(self.per_position):g}, "
                       f"not the accepted total {self.accepted:g}")
        if any(b > a + 1e-9 for a, b in zip(self.per_position, self.per_position[1:], strict=False)):
            out.append("acceptance rises with position (position i+1 cannot be accepted "
                       "without position i)")
        if self.per_position and self.per_position[0] > self.drafts + 1e-9:
            out.append("more tokens accepted at position 0 than there were drafts")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "present": self.present,
            "num_drafts": self.drafts,
            "num_draft_tokens": self.draft_tokens,
            "num_accepted_tokens": self.accepted,
            "accepted_per_position": list(self.per_position),
            "acceptance_rate": self.acceptance_rate,
            "acceptance_length": self.acceptance_length,
            "acceptance_per_position": self.acceptance_per_position,
            "resets": list(self.resets),
        }

    def __add__(self, other: SpecDelta) -> SpecDelta:
        n = max(len(self.per_position), len(other.per_position))
        pad = lambda xs: list(xs) + [0.0] * (n - len(xs))  # noqa: E731
        return SpecDelta(
            drafts=self.drafts + other.drafts,
            draft_tokens=self.draft_tokens + other.draft_tokens,
            accepted=self.accepted + other.accepted,
            per_position=[a + b for a, b in zip(pad(self.per_position),
                                                pad(other.per_position), strict=True)],
            resets=self.resets + other.resets,
            present=self.present or other.present)


def _describe(counter: str, labels: Labels) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{counter}{{{inner}}}"


def _delta(counter: str, before: Mapping[Labels, float], after: Mapping[Labels, float],
           resets: list[str]) -> dict[Labels, float]:
    out: dict[Labels, float] = {}
    for labels, now in after.items():
        was = before.get(labels, 0.0)
        if now < was:  # restarted: everything it counted since is new
            resets.append(_describe(counter, labels))
            out[labels] = now
        else:
            out[labels] = now - was
    for labels in before:
        if labels not in after:
            resets.append(_describe(counter, labels) + " (gone)")
    return out


def spec_delta(before: SpecSnapshot, after: SpecSnapshot) -> SpecDelta:
    """The counters' growth from ``before`` to ``after``, robust to restarts."""
    resets: list[str] = []
    sums: dict[str, float] = {}
    for key in ("drafts", "draft_tokens", "accepted"):
        d = _delta(COUNTERS[key], before.series.get(key, {}), after.series.get(key, {}), resets)
        sums[key] = sum(d.values())
    by_pos: dict[int, float] = {}
    d = _delta(PER_POSITION, before.series.get("per_position", {}),
               after.series.get("per_position", {}), resets)
    for labels, value in d.items():
        pos = dict(labels).get("position")
        if pos is not None and pos.isdigit():
            by_pos[int(pos)] = by_pos.get(int(pos), 0.0) + value
    per_position = [by_pos.get(i, 0.0) for i in range(max(by_pos) + 1)] if by_pos else []
    return SpecDelta(drafts=sums["drafts"], draft_tokens=sums["draft_tokens"],
                     accepted=sums["accepted"], per_position=per_position, resets=resets,
                     present=after.present)
