"""What a served benchmark concludes per concurrency: the outputs compared, and one table.

:func:`compare_outputs` holds the speculative server's answers against the baseline's for
the same requests. At temperature 0 speculative decoding is lossless by construction: the
verifier accepts a drafted token only where it is the verifier's own greedy choice, so
every answer must equal plain greedy decoding's, token for token. A difference means the
engine feeds the drafter or the verifier differently (or a batch's kernels round
differently, which is why each concurrency is reported on its own).

:func:`level_rows` gives, per concurrency, the served figures side by side (plain and
speculative output tokens/s and TPOT, the speedup, served τ and per-position acceptance
from the ``/metrics`` deltas of that level alone, the outputs compared), and
:func:`render_table` prints them as one table. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.eagle3.load_levels import Level
from pipeline.vllm.openai_client import StreamTiming

__all__ = ["OutputComparison", "compare_outputs", "fmt", "level_rows", "render_table"]


@dataclass
class OutputComparison:
    """Spec against baseline answers at one concurrency."""

    concurrency: int
    compared: int = 0
    equal: int = 0
    by_tokens: int = 0                    # comparisons made on token ids (else on text)
    first_difference: dict[str, Any] | None = None

    @property
    def share(self) -> float | None:
        return round(self.equal / self.compared, 4) if self.compared else None

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
        if not equal and out.first_difference is None:
            unit = "token" if by_tokens else "character"
            out.first_difference = {
                "request": i, "prompt": prompt_ids[i % len(prompt_ids)] if prompt_ids
                else str(i), "at": at, "unit": unit,
                "spec": (r.token_ids[at:at + 8] if by_tokens else r.output[at:at + 40]),
                "baseline": (other.token_ids[at:at + 8] if by_tokens  # type: ignore[index]
                             else other.output[at:at + 40])}
    return out


def fmt(x: float | None, spec: str = ".0f") -> str:
    """A table cell: ``-`` for a figure not measured."""
    return "-" if x is None else format(x, spec)


def level_rows(levels: list[Level], comparisons: dict[int, OutputComparison]
               ) -> list[dict[str, Any]]:
    """One row per concurrency, in the order measured."""
    by = {(lv.role, lv.concurrency): lv for lv in levels}
    rows = []
    for c in dict.fromkeys(lv.concurrency for lv in levels):
        spec, base = by.get(("spec", c)), by.get(("baseline", c))
        row: dict[str, Any] = {"concurrency": c}
        for lv, side in ((base, "plain"), (spec, "spec")):
            s = lv.summary() if lv is not None and not lv.interrupted else None
            row[f"{side}_tok_s"] = s["output_throughput"] if s else None
            row[f"{side}_tpot_ms"] = s["tpot_ms"]["p50"] if s else None
        row["speedup"] = (round(row["spec_tok_s"] / row["plain_tok_s"], 4)
                          if row["spec_tok_s"] and row["plain_tok_s"] else None)
        delta = spec.spec if spec is not None else None
        present = delta is not None and delta.present
        row["tau"] = round(delta.acceptance_length, 4) if present and \
            delta.acceptance_length is not None else None  # type: ignore[union-attr]
        row["per_position"] = [round(x, 4) for x in delta.acceptance_per_position] \
            if present else []  # type: ignore[union-attr]
        cmp_ = comparisons.get(c)
        row["outputs_equal"] = cmp_.equal if cmp_ else None
        row["outputs_compared"] = cmp_.compared if cmp_ else None
        rows.append(row)
    return rows


def render_table(rows: list[dict[str, Any]]) -> str:
    """The served figures, one line per concurrency (TPOT: p50 of the requests)."""
    head = ["c", "plain tok/s", "spec tok/s", "speedup", "plain TPOT ms", "spec TPOT ms",
            "served τ", "per position", "outputs = plain"]
    body = []
    for r in rows:
        per = "/".join(f"{x:.3f}" for x in r["per_position"]) or "-"
        same = "-" if r["outputs_compared"] is None else \
            f"{r['outputs_equal']}/{r['outputs_compared']}"
        body.append([str(r["concurrency"]), fmt(r["plain_tok_s"], ".0f"),
                     fmt(r["spec_tok_s"], ".0f"),
                     "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
                     fmt(r["plain_tpot_ms"], ".2f"), fmt(r["spec_tpot_ms"], ".2f"),
                     fmt(r["tau"], ".3f"), per, same])
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(head)]
    line = lambda cells: " | ".join(  # noqa: E731
        c.rjust(w) if i != 7 else c.ljust(w) for i, (c, w) in
        enumerate(zip(cells, widths, strict=True)))
    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([line(head), sep, *(line(b) for b in body)])
