"""Structural checks of the vocabulary mapping: ``d2t``, ``t2d``, and the lm_head rows.

- ``d2t`` int64 offsets with ``i + d2t[i]`` distinct target ids in range (an absolute-id
  ``d2t`` is named as such), ``t2d`` bool with exactly ``draft_vocab_size`` True, and
  ``arange(D) + d2t == t2d.nonzero()`` (``d2t``, ``d2t_offsets``, ``t2d``,
  ``vocab_invariant``);
- the drafter's lm_head row ``i`` scores target token ``i + d2t[i]``: where the head was
  initialised from the verifier's, row ``i`` still resembles the verifier's row for that
  token, and not another token's (``lm_head_rows``).

Part of :func:`pipeline.eagle3.checks.structural.structural_checks`, which calls these
with its report.
"""

from __future__ import annotations

from typing import Any

import torch

from pipeline.eagle3.checks.structural_report import StructuralReport
from pipeline.eagle3.model.checkpoint_files import DrafterLayout, VerifierInfo, WeightSet

__all__ = ["lm_head_check", "mapping_checks"]

# Rows of lm_head compared with the verifier's (all of them when the draft vocab is smaller).
LM_HEAD_SAMPLE = 1024
ROW_MATCH = 0.9   # cosine at or above: "the same row" (bf16 rounding leaves ~0.9999)


def mapping_checks(rep: StructuralReport, lay: DrafterLayout, ws: WeightSet,
                    v: VerifierInfo) -> torch.Tensor | None:
    vocab = v.vocab_size
    draft = lay.draft_vocab_size
    d2t = ws.get("d2t") if "d2t" in ws else None
    t2d = ws.get("t2d") if "t2d" in ws else None
    if d2t is None:
        rep.add("d2t", False, value=None, expected=f"int64 [{draft}]",
                message="no d2t tensor: vLLM silently uses the identity mapping (draft id i "
                        "= target id i) and acceptance collapses; export the drafter with "
                        "its d2t")
    else:
        problems = []
        if d2t.dtype != torch.int64:
            problems.append(f"dtype {str(d2t.dtype).removeprefix('torch.')}, not int64")
        if d2t.dim() != 1 or (draft is not None and d2t.numel() != draft):
            problems.append(f"shape {list(d2t.shape)}, not [{draft}]")
        rep.add("d2t", not problems, value=f"{str(d2t.dtype).removeprefix('torch.')} "
                                           f"{list(d2t.shape)}",
                expected=f"int64 [{draft}]",
                message="; ".join(problems) if problems else "present, int64, one per draft id")
        if d2t.dim() == 1 and not d2t.is_floating_point():
            d2t = d2t.long()
            rep.add("d2t_offsets", *_offsets_verdict(d2t, t2d, vocab))
        else:
            rep.skip("d2t_offsets", "d2t is not a 1-D integer tensor")
    if t2d is None:
        rep.add("t2d", False, value=None, expected=f"bool [{vocab}] with {draft} True",
                message="no t2d tensor: vLLM does not need it, but without it the mapping "
                        "cannot be cross-checked; export it with the drafter")
    else:
        count = int(t2d.sum()) if t2d.dtype == torch.bool else None
        problems = []
        if t2d.dtype != torch.bool:
            problems.append(f"dtype {str(t2d.dtype).removeprefix('torch.')}, not bool")
        if list(t2d.shape) != [vocab]:
            problems.append(f"shape {list(t2d.shape)}, not [{vocab}]")
        if count is not None and draft is not None and count != draft:
            problems.append(f"{count} True entries for a draft vocab of {draft}")
        rep.add("t2d", not problems, value={"dtype": str(t2d.dtype).removeprefix("torch."),
                                            "true": count},
                expected={"dtype": "bool", "true": draft},
                message="; ".join(problems) if problems else
                f"bool, exactly {draft} target ids marked")
    if d2t is not None and t2d is not None and d2t.dim() == 1 and t2d.dim() == 1 \
            and not d2t.is_floating_point():
        ids = torch.arange(d2t.numel()) + d2t.long()
        marked = t2d.bool().nonzero().flatten()
        ok = torch.equal(ids, marked)
        diff = int((ids[: marked.numel()] != marked[: ids.numel()]).sum()) \
            if ids.numel() and marked.numel() else max(ids.numel(), marked.numel())
        rep.add("vocab_invariant", ok, value=None if ok else f"{diff} positions differ"
                + ("" if ids.numel() == marked.numel() else
                   f", {ids.numel()} draft ids vs {marked.numel()} marked"),
                expected="arange(D) + d2t == t2d.nonzero()",
                message="d2t and t2d describe the same draft vocabulary" if ok else
                "d2t and t2d disagree: one of them is stale (rebuild both from one vocab "
                "file, or export again)")
    else:
        rep.skip("vocab_invariant", "needs both d2t and t2d")
    return d2t


def _offsets_verdict(d2t: torch.Tensor, t2d: torch.Tensor | None, vocab: int
                     ) -> tuple[bool, Any, Any, str]:
    """(passed, value, expected, message) for ``d2t`` read as offsets.

    Offsets give target ids ``i + d2t[i]`` that are distinct and inside the vocabulary.
    A ``d2t`` that is itself a set of distinct in-range ids, and is what ``t2d`` marks (or
    whose offsets would not be valid ids), was written as absolute ids.
    """
    ids = torch.arange(d2t.numel()) + d2t
    in_range = bool(((ids >= 0) & (ids < vocab)).all())
    distinct = ids.unique().numel() == ids.numel()
    value = {"min_id": int(ids.min()), "max_id": int(ids.max()), "distinct": distinct}
    expected = f"distinct ids in 0..{vocab - 1}"
    id_like = d2t.numel() > 1 and bool(((d2t >= 0) & (d2t < vocab)).all()) and \
        d2t.unique().numel() == d2t.numel()
    marked = t2d.bool().nonzero().flatten() if t2d is not None and t2d.dim() == 1 else None
    absolute = id_like and not torch.equal(ids, d2t) and (
        (marked is not None and torch.equal(marked, d2t) and not torch.equal(marked, ids))
        or not (in_range and distinct))
    if absolute:
        return (False, value, expected,
                "d2t holds absolute target ids, not offsets (vLLM computes i + d2t[i], "
                f"which gives ids up to {int(ids.max())}): store d2t[i] = target_id - i")
    if in_range and distinct:
        return True, value, expected, f"target ids i + d2t[i] are distinct and in 0..{vocab - 1}"
    why = [] if in_range else [f"ids outside 0..{vocab - 1}"]
    why += [] if distinct else ["repeated target ids"]
    return (False, value, expected,
            f"i + d2t[i] gives {' and '.join(why)}: d2t is not a mapping into this "
            "verifier's vocabulary")


def lm_head_check(rep: StructuralReport, ws: WeightSet, v: VerifierInfo,
                  d2t: torch.Tensor | None) -> None:
    name = "lm_head.weight"
    if name not in ws or d2t is None or d2t.dim() != 1 or d2t.is_floating_point():
        rep.skip("lm_head_rows", "needs lm_head.weight and an integer d2t")
        return
    info = ws.tensors[name]
    if len(info.shape) != 2 or info.shape[0] != d2t.numel() or info.shape[1] != v.hidden_size:
        rep.skip("lm_head_rows", f"lm_head {info.shape} cannot be compared with the "
                                 f"verifier's rows (hidden {v.hidden_size})")
        return
    ids = torch.arange(d2t.numel()) + d2t.long()
    if not bool(((ids >= 0) & (ids < v.vocab_size)).all()):
        rep.skip("lm_head_rows", "d2t maps outside the vocabulary")
        return
    vws, head = v.head_weights()
    with vws:
        rows = _sample_rows(d2t.numel())
        draft_rows = torch.stack([ws.rows(name, r, r + 1)[0] for r in rows]).float()
        mapped = torch.stack([vws.rows(head, int(ids[r]), int(ids[r]) + 1)[0]
                              for r in rows]).float()
        cos = torch.nn.functional.cosine_similarity(draft_rows, mapped, dim=-1)
        at_mapped = float((cos >= ROW_MATCH).float().mean())
        median = float(cos.median())
        rep.metrics["lm_head_rows_match"] = round(at_mapped, 4)
        if at_mapped >= 0.99:
            rep.add("lm_head_rows", True, value=round(at_mapped, 4), expected=">= 0.99",
                    message=f"{at_mapped:.0%} of {len(rows)} sampled rows equal the "
                            "verifier's rows at i + d2t[i] (median cosine "
                            f"{median:.4f})")
            return
        # Rows that do not match their mapped token: do they match another token's row?
        # That is a stale mapping (warm start, permuted rows), not an independent head.
        odd = [i for i, c in enumerate(cos.tolist()) if c < ROW_MATCH][:64]
        elsewhere = _best_elsewhere(vws, head, v.vocab_size, draft_rows[odd])
        stale = float((elsewhere >= ROW_MATCH).float().mean()) if odd else 0.0
        rep.metrics["lm_head_rows_elsewhere"] = round(stale, 4)
        if at_mapped < 0.5 and stale < 0.5:
            rep.add("lm_head_rows", True, value=round(at_mapped, 4),
                    message=f"the head was not initialised from the verifier's rows "
                            f"(median cosine {median:.3f}, and unmatched rows resemble no "
                            "other verifier row): the mapping cannot be checked this way; "
                            "the functional checks decide")
            return
        rep.add("lm_head_rows", False, value=round(at_mapped, 4), expected=">= 0.99",
                message=f"only {at_mapped:.0%} of {len(rows)} sampled rows equal the "
                        f"verifier's rows at i + d2t[i]; {stale:.0%} of the others equal "
                        "the verifier's row of a different token: lm_head and d2t come "
                        "from different vocab mappings (a warm start that changed the "
                        "vocab?); keep the drafter's own d2t/t2d, or rebuild lm_head "
                        "from the verifier for this d2t")


def _sample_rows(n: int) -> list[int]:
    if n <= LM_HEAD_SAMPLE:
        return list(range(n))
    g = torch.Generator().manual_seed(0)
    return sorted(torch.randperm(n, generator=g)[:LM_HEAD_SAMPLE].tolist())


def _best_elsewhere(vws: WeightSet, head: str, vocab: int, rows: torch.Tensor,
                    block: int = 2048) -> torch.Tensor:
    """For each row, its best cosine against every verifier lm_head row (streamed)."""
    if rows.numel() == 0:
        return torch.zeros(0)
    q = torch.nn.functional.normalize(rows, dim=-1)
    best = torch.full((rows.shape[0],), -1.0)
    for start in range(0, vocab, block):
        w = torch.nn.functional.normalize(vws.rows(head, start, min(start + block, vocab))
                                          .float(), dim=-1)
        best = torch.maximum(best, (q @ w.T).max(-1).values)
    return best
