#!/usr/bin/env python3
"""Drafter training on batches of varying length: do the opt-in fast paths hold up?

``bench/eagle3/gpu.py`` measures a training step at one fixed shape. The train stage packs
``--batch-tokens`` per batch, so the padded length S (and the rows B = tokens // S) change
from batch to batch. This runs the same sequence of such batches, from the same initial
weights, through each attention/compile variant and reports, against the plain PyTorch
path (``--attn sdpa --no-compile-blocks``) measured in the same run:

- wall time for all steps (compiles included) and the median step's tokens/s over the
  second half (steady: a recompile for a new length is one slow step, not the figure);
- graphs compiled and whether dynamo gave up on a function (its recompile limit: after
  that the function runs eager, silently slower);
- the loss at the first step (same weights, same batch: the kernels must agree) and the
  largest relative gap over all steps (the trajectories drift apart only by rounding).

    python -m bench.eagle3.varlen [--steps 40] [--batch-tokens 16384] [--warmup N] [--tiny]

``--tiny`` runs small shapes on the CPU: a smoke test of this script, not a measurement.
"""

from __future__ import annotations

import argparse
import logging
import math
import time

import torch

VARIANTS = [  # (label, attn, compiled blocks)
    ("sdpa, eager blocks (plain PyTorch)", "sdpa", False),
    ("flex, eager blocks", "flex", False),
    ("flex, compiled blocks", "flex", True),
    ("sdpa, compiled blocks (the stage's default)", "sdpa", True),
]


class _LimitWatch(logging.Handler):
    """Counts dynamo's "hit the recompile limit" warnings (the function falls back to eager)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "recompile_limit" in msg or "cache_size_limit" in msg:
            self.hits.append(msg.splitlines()[0][:160])


def batch_plan(steps: int, batch_tokens: int, lo: int, hi: int, seed: int) -> list[tuple[int, list[int]]]:
    """(S, per-row lengths) per step: S log-uniform in [lo, hi], rows = tokens // S."""
    g = torch.Generator().manual_seed(seed)
    plan = []
    for _ in range(steps):
        u = torch.rand((), generator=g).item()
        s = round(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))))
        rows = max(1, batch_tokens // s)
        lengths = [s] + [int(x) for x in torch.randint(max(1, s // 2), s + 1, (rows - 1,),
                                                        generator=g)]
        plan.append((s, lengths))
    return plan


def run_variant(attn: str, blocks: bool, plan, tiny: bool, device) -> dict:
    import torch._dynamo

    from bench.eagle3.gpu import make_trainer


    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    train, cfg = make_trainer(tiny, 3, device, attn, device.type == "cuda", blocks)
    dt = torch.float32 if tiny else torch.bfloat16
    losses, times, tokens = [], [], []
    for i, (s, lengths) in enumerate(plan):
        # Made on the device: 400 MB of random hidden states a batch on the CPU took
        # longer than the steps themselves.
        g = torch.Generator(device=device).manual_seed(100 + i)
        b = len(lengths)
        aux = torch.randn(b, s, 3 * cfg.hidden_size, generator=g, device=device, dtype=dt)
        last = torch.randn(b, s, cfg.hidden_size, generator=g, device=device, dtype=dt)
        input_ids = torch.randint(0, cfg.vocab_size, (b, s), generator=g, device=device)
        mask = (torch.arange(s)[None, :] < torch.tensor(lengths)[:, None]).to(device,
                                                                              torch.uint8)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        loss = train(aux, last, input_ids, mask)
        losses.append(float(loss.detach()))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        tokens.append(sum(lengths))
    half = len(plan) // 2
    rates = sorted(n / t for n, t in zip(tokens[half:], times[half:], strict=True))
    stats = torch._dynamo.utils.counters["stats"]
    slow = sorted(range(len(times)), key=lambda k: -times[k])[:3]
    return {"losses": losses, "wall": sum(times),
            "slowest": [(plan[k][0], round(times[k] * 1e3)) for k in slow],
            "steady_tok_s": rates[len(rates) // 2],
            "graphs": int(stats.get("unique_graphs", 0))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-tokens", type=int, default=16384)
    p.add_argument("--min-len", type=int, default=128)
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--variants", default="0,1,2,3", help="indexes into the variant list")
    p.add_argument("--warmup", type=int, default=None,
                   help="steps of the plain variant run first and not reported "
                        "(default: all of them)")
    args = p.parse_args(argv)
    tiny = args.tiny or not torch.cuda.is_available()
    device = torch.device("cpu" if tiny else "cuda")
    if tiny:
        args.batch_tokens, args.min_len, args.max_len = 1024, 16, 256
    plan = batch_plan(args.steps, args.batch_tokens, args.min_len, args.max_len, seed=0)
    if args.warmup is None:
        args.warmup = args.steps
    watch = _LimitWatch()
    logging.getLogger("torch._dynamo").addHandler(watch)
    print(f"device {torch.cuda.get_device_name(0) if not tiny else 'cpu (tiny smoke test)'}, "
          f"torch {torch.__version__}; {args.steps} steps, {args.batch_tokens} tokens a batch,"
          f" {len({s for s, _ in plan})} distinct lengths in [{min(s for s, _ in plan)}, "
          f"{max(s for s, _ in plan)}]")
    if args.warmup:
        # The first variant of a process paid the CUDA context, cuBLAS and cold compile
        # caches: 25k tok/s against 110k for the same variant run again.
        run_variant("sdpa", False, plan[:args.warmup], tiny, device)
    rows, base = [], None
    for idx in (int(x) for x in args.variants.split(",")):
        label, attn, blocks = VARIANTS[idx]
        if tiny and attn == "flex":
            continue  # flex_attention's compiled kernels are GPU-only
        before = len(watch.hits)
        try:
            r = run_variant(attn, blocks, plan, tiny, device)
        except Exception as exc:  # a variant that cannot run here is reported, not fatal
            rows.append((label, None, f"failed: {type(exc).__name__}: "
                                      f"{str(exc).splitlines()[0][:100]}"))
            continue
        r["limit_hits"] = watch.hits[before:]
        base = base or r
        rows.append((label, r, ""))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print("| variant | wall s (all steps) | steady tok/s | × plain | graphs | recompile "
          "limit hit | loss step 1 | rel. gap step 1 | max rel. gap |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, r, note in rows:
        if r is None:
            print(f"| {label} | {note} | | | | | | | |")
            continue
        gaps = [abs(a - b) / abs(b) for a, b in zip(r["losses"], base["losses"], strict=True)]
        print(f"| {label} | {r['wall']:.1f} | {r['steady_tok_s']:,.0f} | "
              f"{r['steady_tok_s'] / base['steady_tok_s']:.2f} | {r['graphs']} | "
              f"{len(r['limit_hits'])} | {r['losses'][0]:.5f} | {gaps[0]:.1e} | "
              f"{max(gaps):.1e} |")
    for label, r, _ in rows:
        if r is not None:
            print(f"  {label}: slowest steps (S, ms): {r['slowest']}")
        for hit in (r or {}).get("limit_hits", [])[:3]:
            print(f"  {label}: {hit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
