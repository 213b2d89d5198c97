"""What a served benchmark compares per concurrency: the answers of two servers.

:func:`compare_outputs` holds the speculative server's answers against the baseline's for
the same requests. At temperature 0 speculative decoding is lossless by construction: the
verifier accepts a drafted token only where it is the verifier's own greedy choice, so
every answer must equal plain greedy decoding's, token for token. A difference means the
engine feeds the drafter or the verifier differently (or a batch's kernels round
differently, which is why each concurrency is reported on its own). Each differing answer's
first differing token, with the context plain scored it in, is kept as a
:class:`~pipeline.eagle3.serving.near_ties.Divergence` for
:mod:`pipeline.eagle3.serving.near_ties` to judge. The tables are
:mod:`pipeline.eagle3.serving.tables`'. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.eagle3.serving.load_levels import Level
from pipeline.eagle3.serving.near_ties import Divergence
from pipeline.vllm.openai_client import StreamTiming

__all__ = ["OutputComparison", "compare_outputs", "fmt"]


@dataclass
class OutputComparison:
    """Spec against baseline answers at one concurrency."""

    concurrency: int
    compared: int = 0
    equal: int = 0
    by_tokens: int = 0                    # comparisons made on token ids (else on text)
    first_difference: dict[str, Any] | None = None
    # the differing answers' first differing tokens, one per distinct place
    divergences: list[Divergence] = field(default_factory=list)
    unplaced: int = 0                     # differing answers with no Divergence (no ids)

    @property
    def share(self) -> float | None:
        return round(self.equal / self.compared, 4) if self.compared else None

    def merged(self, other: OutputComparison) -> OutputComparison:
        """This comparison and another of the same level (another trial's)."""
        seen = {d.key for d in self.divergences}
        return OutputComparison(self.concurrency, self.compared + other.compared,
                                self.equal + other.equal, self.by_tokens + other.by_tokens,
                                self.first_difference or other.first_difference,
                                self.divergences + [d for d in other.divergences
                                                    if d.key not in seen],
                                self.unplaced + other.unplaced)

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "compared": self.compared,
                "equal": self.equal, "share": self.share, "by_tokens": self.by_tokens,
                "first_difference": self.first_difference}


def _first_diff(a: list[Any] | str, b: list[Any] | str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _same(spec: StreamTiming, base: StreamTiming) -> tuple[bool, bool, int]:
    """(equal, compared on token ids, first differing position)."""
    if spec.token_ids is not None and base.token_ids is not None:
        return spec.token_ids == base.token_ids, True, _first_diff(spec.token_ids,
                                                                    base.token_ids)
    return spec.output == base.output, False, _first_diff(spec.output, base.output)


def compare_outputs(spec: Level, base: Level, prompt_ids: list[str]) -> OutputComparison:
    """Request i of one level against request i of the other (the same prompt and body);
    failed requests on either side are not compared (``requests_ok`` counts them)."""
    out = OutputComparison(spec.concurrency)
    base_by = {i: r for i, r in base.records if r.ok}
    for i, r in sorted(spec.records, key=lambda x: x[0]):
        other = base_by.get(i)
        if not r.ok or other is None:
            continue
        equal, by_tokens, at = _same(r, other)
        out.compared += 1
        out.equal += equal
        out.by_tokens += by_tokens
        if not equal:
            _place(out, r, other, prompt_ids[i % len(prompt_ids)] if prompt_ids else str(i),
                   at)
        if not equal and out.first_difference is None:
            unit = "token" if by_tokens else "character"
            out.first_difference = {
                "request": i, "prompt": prompt_ids[i % len(prompt_ids)] if prompt_ids
                else str(i), "at": at, "unit": unit,
                "spec": (r.token_ids[at:at + 8] if by_tokens else r.output[at:at + 40]),
                "baseline": (other.token_ids[at:at + 8] if by_tokens  # type: ignore[index]
                             else other.output[at:at + 40])}
    return out


def _place(out: OutputComparison, spec: StreamTiming, base: StreamTiming, prompt: str,
           at: int) -> None:
    """Keep where this differing answer first parts from plain's, once per place."""
    ids, plain, context = spec.token_ids, base.token_ids, base.prompt_token_ids
    if ids is None or plain is None or context is None or at >= len(ids) or \
            at >= len(plain):
        out.unplaced += 1  # no ids to judge by, or one answer is a prefix of the other
        return
    d = Divergence(prompt, at, ids[at], plain[at], tuple(context) + tuple(plain[:at]))
    if all(x.key != d.key for x in out.divergences):
        out.divergences.append(d)


def fmt(x: float | None, spec: str = ".0f") -> str:
    """A table cell: ``-`` for a figure not measured."""
    return "-" if x is None else format(x, spec)


