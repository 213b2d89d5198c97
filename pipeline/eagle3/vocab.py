"""Action ``eagle3.vocab``: the draft vocabulary mapping (``d2t``, ``t2d``) from frequencies.

Input: tokenize's ``freqs.safetensors`` and the verifier (for its vocab size). Output:
``vocab.safetensors`` with ``d2t`` int64 ``[draft_vocab]`` and ``t2d`` bool
``[target_vocab]`` (:mod:`pipeline.eagle3.text.datafiles`).

The draft vocab is the ``--draft-vocab`` most frequent target ids over loss-masked tokens,
sorted ascending; equal counts go to the lower id, so the result never depends on sort
stability. When fewer distinct tokens were seen than asked for, the rest is filled with unseen
ids in ascending order (``--fill-unseen``, the default, keeps the requested size that configs
and vLLM expect) or the vocab shrinks to what was seen (``--no-fill-unseen``).

Checks: the invariant ``arange(draft_vocab) + d2t == t2d.nonzero()``, ``t2d.sum() ==
draft_vocab``, and the share of loss-masked tokens the draft vocab covers
(``--min-coverage``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, add_bool_arg, make_parser, run_action
from pipeline.eagle3.common import add_threads_arg, use_threads, verifier_config
from pipeline.eagle3.text.datafiles import mapping_problem, read_freqs, write_vocab
from pipeline.errors import ActionError

ACTION = "eagle3.vocab"


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Build d2t/t2d from token frequencies.")
    p.add_argument("--freqs", type=Path, required=True,
                   help="freqs.safetensors or tokenize's output directory")
    p.add_argument("--verifier", type=Path, required=True, help="for the target vocab size")
    p.add_argument("--draft-vocab", type=int, required=True)
    p.add_argument("--out", type=Path, required=True,
                   help="vocab.safetensors, or a directory to write it in")
    add_bool_arg(p, "fill-unseen", True,
                 "fill a vocab larger than the tokens seen with unseen ids (else shrink)")
    p.add_argument("--min-coverage", type=float, default=0.0,
                   help="fail when the draft vocab covers less of the masked tokens")
    add_threads_arg(p)
    return p


def build_mapping(counts: Any, draft_vocab: int, fill_unseen: bool = True) -> tuple[Any, Any]:
    """``(d2t, t2d)`` for the ``draft_vocab`` most frequent ids (ties: lower id first)."""
    import torch

    target_vocab = counts.numel()
    if draft_vocab > target_vocab:
        raise ValueError(f"draft vocab {draft_vocab} > target vocab {target_vocab}")
    ids = torch.arange(target_vocab)
    # ids are already ascending, so a stable sort by count keeps ties in id order.
    order = torch.sort(counts.to(torch.int64), descending=True, stable=True).indices
    seen = int((counts > 0).sum())
    take = draft_vocab if fill_unseen else min(draft_vocab, seen)
    chosen = torch.sort(ids[order[:take]]).values
    t2d = torch.zeros(target_vocab, dtype=torch.bool)
    t2d[chosen] = True
    d2t = (chosen - torch.arange(take)).to(torch.int64)
    return d2t, t2d


def run(args: argparse.Namespace) -> StageResult:
    result = StageResult(action=ACTION)
    counts, fpath = read_freqs(Path(args.freqs))
    vcfg = verifier_config(Path(args.verifier))
    target_vocab = int(vcfg["vocab_size"])
    if counts.dim() != 1 or counts.numel() != target_vocab:
        raise ActionError(f"frequencies are for a vocab of {counts.numel()}, the verifier has "
                          f"{target_vocab}", where=str(fpath),
                          hint="tokenize again with this verifier")
    if args.draft_vocab <= 0:
        raise ActionError("--draft-vocab must be positive")
    if args.draft_vocab > target_vocab:
        raise ActionError(f"draft vocab {args.draft_vocab} is larger than the target's "
                          f"{target_vocab}", where=str(Path(args.verifier) / "config.json"))
    d2t, t2d = build_mapping(counts, args.draft_vocab, args.fill_unseen)
    problem = mapping_problem(d2t, t2d)
    total = int(counts.sum())
    covered = int(counts[t2d].sum())
    coverage = covered / total if total else 0.0
    seen = int((counts > 0).sum())
    out = write_vocab(Path(args.out), d2t, t2d,
                      {"coverage": round(coverage, 6), "source": str(fpath)})
    result.metrics.update(draft_vocab=int(d2t.numel()), requested=args.draft_vocab,
                          target_vocab=target_vocab, seen_tokens=seen,
                          filled_unseen=max(0, int(d2t.numel()) - seen),
                          coverage=round(coverage, 6), masked_tokens=total)
    result.artifacts.append(str(out))
    result.check("invariant", problem is None, message=problem or
                 "arange(draft_vocab) + d2t == t2d.nonzero()")
    result.check("t2d_count", int(t2d.sum()) == d2t.numel(), value=int(t2d.sum()),
                 expected=int(d2t.numel()))
    result.check("coverage", coverage >= args.min_coverage, value=round(coverage, 6),
                 expected=f">= {args.min_coverage}")
    if d2t.numel() < args.draft_vocab:
        result.metrics["note"] = f"only {seen} distinct tokens seen: vocab shrunk"
    result.summary = (f"vocab: {d2t.numel()} draft ids of {target_vocab}, covering "
                      f"{coverage:.2%} of masked tokens ({seen} distinct seen)")
    return result


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv, setup=use_threads)


if __name__ == "__main__":
    raise SystemExit(main())
