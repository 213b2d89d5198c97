#!/usr/bin/env python3
"""The free-running verification loop on a GPU: acceptance, and the reference loop's speed
(its wall-clock bound and its projection; neither is served: vLLM's is eagle3.benchmark's).

Two parts, one table:

1. ``eagle3.verify`` on a trained tiny verifier/drafter pair (the embedded pipeline's, carried
   as files): teacher-forced and free-running acceptance, the lossless check, and time per
   token of the speculative loop against plain greedy decoding of the same prompts, in fp32
   (TF32 off) and bf16. The tiny verifier (7 layers, H 128) is launch-bound on a GPU: a
   step costs its kernel launches, not its FLOPs.
2. The cost model at a real shape: a Llama-3.2-1B-shaped verifier (16 layers, H 2048, bf16,
   random weights) and an EAGLE-3 drafter of matching shape (draft vocab 32000), timed with
   the same loop code (``VerifierSteps``, ``Eagle3Drafter.step``, KV caches) on a 512-token
   prompt: one plain decoding step, one verify step of k+1 tokens, one draft step, and the
   speedup they project at the tiny pair's measured tau and at vLLM's reference 2.8.

    python -m bench.eagle3.verify_gpu --tiny-dir DIR [--out DIR] [--device cuda] [--samples 64]
    python -m bench.eagle3.verify_gpu --tiny-dir DIR --device cpu --small   # smoke test on the CPU

``DIR`` holds ``verifier/``, ``drafter/``, ``previous/``, ``prompts.jsonl``,
``samples.jsonl`` (the tiny run's ``data/generated/samples.jsonl``, to exclude).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
                max_position_embeddings=8192, tie_word_embeddings=True)
SMALL = dict(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5,
             rope_theta=10000.0, max_position_embeddings=2048, tie_word_embeddings=True)


def verify_run(tiny: Path, out: Path, device: str, dtype: str, k: int, samples: int) -> dict:
    result = out / f"verify-{dtype}-k{k}.json"
    cmd = [sys.executable, "-m", "pipeline.eagle3.verify", "--checkpoint", str(tiny / "drafter"),
           "--verifier", str(tiny / "verifier"), "--data", str(tiny / "prompts.jsonl"),
           "--exclude", str(tiny / "samples.jsonl"), "--previous", str(tiny / "previous"),
           "--samples", str(samples), "--max-new-tokens", "96", "--k", str(k),
           "--device", device, "--dtype", dtype, "--result", str(result)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t
    if not result.exists():
        raise SystemExit(f"verify failed ({proc.returncode}): {proc.stderr[-2000:]}")
    data = json.loads(result.read_text())
    data["wall"] = wall
    data["returncode"] = proc.returncode
    return data


def cost_model(shape: dict, device: str, k: int, prompt_len: int = 512, steps: int = 40
               ) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.eagle3.model.drafter import DrafterCache, DrafterConfig, Eagle3Drafter
    from pipeline.eagle3.model.specdecode import Timer, VerifierSteps

    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(dev):
        model = LlamaForCausalLM(LlamaConfig(**shape, attn_implementation="sdpa"))
    model = model.to(dtype).eval()
    n = shape["num_hidden_layers"]
    cfg = DrafterConfig.from_verifier({**shape, "architectures": ["LlamaForCausalLM"],
                                       "model_type": "llama"},
                                      draft_vocab_size=min(32000, shape["vocab_size"] // 2),
                                      aux_layer_ids=[2, n // 2, n - 3])
    drafter = Eagle3Drafter(cfg).to(device=dev, dtype=dtype).eval()
    steps_v = VerifierSteps(model, cfg.aux_layer_ids)
    timer = Timer(dev)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, shape["vocab_size"], (prompt_len,), generator=g).tolist()
    with torch.no_grad():
        for kind, width in (("plain", 1), ("verify", k + 1)):
            cache = steps_v.new_cache()
            steps_v.forward(prompt, cache, want_aux=kind == "verify")
            base = cache.get_seq_length()
            for i in range(steps + 5):
                ids = prompt[i % prompt_len: i % prompt_len + width]
                t = Timer(dev)
                t.run(kind, steps_v.forward, ids, cache, kind == "verify")
                if i >= 5:  # warm-up steps are not counted
                    timer.add(kind, t.times[kind][0])
                steps_v.crop(cache, base + (i + 1) % 8)  # keep the context near prompt_len
        dcache = DrafterCache()
        aux = torch.randn(1, prompt_len, 3 * shape["hidden_size"], device=dev, dtype=dtype)
        ids = torch.tensor([prompt], device=dev)
        _, pre = drafter.step(ids, drafter.fc(aux), torch.arange(prompt_len, device=dev), dcache)
        pre = pre[:, -1:]
        for i in range(steps + 5):
            t = Timer(dev)
            pos = torch.tensor([prompt_len + i % 8], device=dev)
            _, pre = t.run("draft", drafter.step, ids[:, :1], pre, pos, dcache)
            if i >= 5:
                timer.add("draft", t.times["draft"][0])
            dcache.truncate(prompt_len + (i + 1) % 8)
    med = {kind: statistics.median(timer.times[kind]) for kind in ("plain", "verify", "draft")}
    return med


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny-dir", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("/tmp/verify-gpu"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--small", action="store_true", help="small cost-model shape (CPU smoke)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    print(f"device {args.device} ({gpu}), torch {torch.__version__}", flush=True)
    runs = []
    for dtype, k in (("float32", 3), ("bfloat16", 3), ("float32", 5)):
        r = verify_run(args.tiny_dir, args.out, args.device, dtype, k, args.samples)
        runs.append((dtype, k, r))
        m = r["metrics"]
        print(f"verify {dtype} k={k}: rc {r['returncode']} wall {r['wall']:.1f}s; "
              f"{r['summary']}", flush=True)
    print()
    print(f"{'run':<16} {'tau':>5} {'tf tau':>6} {'pos1..k':<22} {'lossless':>8} "
          f"{'plain ms/tok':>12} {'spec ms/tok':>11} {'ref bound':>8} {'projected':>9} "
          f"{'untrained tau':>13}")
    for dtype, k, r in runs:
        m = r["metrics"]
        if "tau" not in m:
            print(f"{dtype} k={k}: no functional result ({r.get('error')})")
            continue
        lossless = next(c for c in r["checks"] if c["name"] == "lossless")
        print(f"{dtype + ' k=' + str(k):<16} {m['tau']:5.2f} {m['teacher_forced_tau']:6.2f} "
              f"{'/'.join(f'{x:.2f}' for x in m['acceptance_per_position']):<22} "
              f"{'yes' if lossless['passed'] else 'NO':>8} {m['plain_ms_per_token']:12.3f} "
              f"{m['spec_ms_per_token']:11.3f} {m['reference_speedup_bound']:7.2f}x "
              f"{m['projected_speedup']:8.2f}x {m['untrained_acceptance_length']:13.2f}")
    print()
    tau = next(r["metrics"]["tau"] for d, k, r in runs if d == "float32" and k == 3)
    shape = SMALL if args.small else LLAMA_1B
    for k in (3, 5):
        med = cost_model(shape, args.device, k)
        round_cost = med["verify"] + k * med["draft"]
        name = "small" if args.small else "Llama-3.2-1B"
        where = "bf16 on the GPU" if args.device.startswith("cuda") else "fp32 on the CPU"
        print(f"cost model ({name} shape, {where}, context 512, k={k}): plain step "
              f"{med['plain'] * 1e3:.3f} ms, verify step {med['verify'] * 1e3:.3f} ms "
              f"({med['verify'] / med['plain']:.2f}x plain), draft step "
              f"{med['draft'] * 1e3:.3f} ms ({med['draft'] / med['plain']:.2f}x plain); "
              f"projected speedup at tau {tau:.2f}: "
              f"{tau * med['plain'] / round_cost:.2f}x, at tau 2.8: "
              f"{2.8 * med['plain'] / round_cost:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
