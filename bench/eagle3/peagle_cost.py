#!/usr/bin/env python3
"""P-EAGLE against EAGLE-3 on this machine: a training step and a drafting round, each
timed for both methods in alternation, in one process, on the same inputs.

- ``train step``: ``TTTLoss`` forward and backward plus one AdamW step on a training batch
  of the given hidden-state shards (the first batch of epoch 0, as ``eagle3.train`` makes
  it), for a fresh drafter of the verifier's shape: EAGLE-3's unrolled ``k`` steps, or
  P-EAGLE's ``k`` parallel depths (:mod:`pipeline.eagle3.model.peagle`).
- ``drafting round``: what the reference loop (``specdecode.speculative_decode``) runs
  per round after a prefix of ``--context`` rows in the drafter's KV cache: EAGLE-3 one
  forward over the 2 new verified rows then ``k - 1`` one-row forwards; P-EAGLE one
  forward over the 2 rows and ``k - 1`` mask rows; the cache cut back after each.

Weights do not change the costs, so both drafters are freshly initialised. Medians over
``--repeats`` alternations (a neighbour's load shifts both alike). Prints one table.

    python -m bench.eagle3.peagle_cost --hidden-states examples/runs/peagle-tiny/data/hidden \\
        --verifier examples/runs/peagle-tiny/verifier [--k 3 5] [--repeats 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def _drafter(method: str, vcfg: dict, aux: list[int], draft_vocab: int):
    from pipeline.eagle3.model.drafter import DrafterConfig, Eagle3Drafter

    cfg = DrafterConfig.from_verifier(vcfg, draft_vocab_size=draft_vocab, aux_layer_ids=aux,
                                      method=method,
                                      mask_token_id=0 if method == "peagle" else None)
    return Eagle3Drafter(cfg)


def _round(drafter, cache, ctx: int, k: int, hidden, ids) -> None:
    import torch

    if drafter.config.parallel:
        mask_ids, mask_hidden = drafter.mask_rows(1, k - 1)
        drafter.step(torch.cat([ids, mask_ids], 1), torch.cat([hidden, mask_hidden], 1),
                     torch.arange(ctx, ctx + 1 + k), cache)
    else:
        _logits, pre = drafter.step(ids, hidden, torch.arange(ctx, ctx + 2), cache)
        for j in range(1, k):
            _logits, pre = drafter.step(ids[:, :1], pre[:, -1:],
                                        torch.tensor([ctx + 1 + j]), cache)
    cache.truncate(ctx)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden-states", type=Path, required=True)
    p.add_argument("--verifier", type=Path, required=True)
    p.add_argument("--k", type=int, nargs="+", default=[3, 5])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--draft-vocab", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    import torch

    from pipeline.eagle3.model.drafter import DrafterCache
    from pipeline.eagle3.training.train_data import TrainData
    from pipeline.eagle3.training.ttt import TTTLoss

    torch.set_num_threads(args.threads)
    vcfg = json.loads((args.verifier / "config.json").read_text())
    data = TrainData(args.hidden_states, seed=0, holdout=0.1, max_length=4096)
    batch = data.load(data.epoch_batches(0, args.batch_size, args.batch_tokens)[0])
    head = torch.randn(args.draft_vocab, int(vcfg["hidden_size"]))
    rows = []
    for k in args.k:
        torch.manual_seed(0)
        models = {m: _drafter(m, vcfg, data.aux_layers, args.draft_vocab)
                  for m in ("eagle3", "peagle")}
        losses = {m: TTTLoss(d, head, steps=k, decay=1.0) for m, d in models.items()}
        opts = {m: torch.optim.AdamW(d.trainable_parameters(), lr=1e-4)
                for m, d in models.items()}
        train = {m: [] for m in models}
        draft = {m: [] for m in models}
        h = int(vcfg["hidden_size"])
        ctx_aux = torch.randn(1, args.context, 3 * h)
        ctx_ids = torch.randint(0, int(vcfg["vocab_size"]), (1, args.context))
        caches = {}
        with torch.no_grad():
            for m, d in models.items():
                caches[m] = DrafterCache()
                d.step(ctx_ids, d.fc(ctx_aux), torch.arange(args.context), caches[m])
        new_ids = ctx_ids[:, :2]
        for r in range(args.repeats + 2):  # two warm-up rounds, not counted
            for m, d in models.items():
                t0 = time.perf_counter()
                loss, _c, _n = losses[m](batch.aux, batch.last, batch.input_ids,
                                         batch.loss_mask)
                loss.backward()
                opts[m].step()
                opts[m].zero_grad(set_to_none=True)
                t1 = time.perf_counter()
                with torch.no_grad():
                    hidden = d.fc(ctx_aux[:, :2])
                    _round(d, caches[m], args.context, k, hidden, new_ids)
                t2 = time.perf_counter()
                if r >= 2:
                    train[m].append(t1 - t0)
                    draft[m].append(t2 - t1)
        for m in models:
            rows.append((m, k, statistics.median(train[m]) * 1e3,
                         statistics.median(draft[m]) * 1e3, 1 if m == "peagle" else k))
    print(f"batch {tuple(batch.input_ids.shape)} ({batch.tokens} tokens), context "
          f"{args.context} rows, hidden {vcfg['hidden_size']}, {args.threads} thread(s), "
          f"medians of {args.repeats}")
    print("| method | k | train step (ms) | drafting round (ms) | drafter forwards / round |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for m, k, tr, dr, fw in rows:
        print(f"| {m} | {k} | {tr:.1f} | {dr:.2f} | {fw} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
