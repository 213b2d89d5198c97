#!/usr/bin/env python3
"""Structural checks of an 8B-shaped EAGLE-3 drafter: time and memory, against plain reads.

Writes (once; reused with --dir) a Llama-3.1-8B-shaped drafter in vLLM's EAGLE format,
random bf16 values in the right shapes (H 4096, 32 heads, 8 KV heads, MLP 14336, draft vocab
32000 of 128256, fc 3x4096 -> 4096, no embeddings: ~0.85 GB), and a verifier directory with
the config and the output head the checks read (lm_head 128256 x 4096 bf16, ~1 GB). The
drafter's lm_head rows are the verifier's rows at its draft ids, as a real one's are.

Each step runs in a fresh interpreter that reports its wall time and peak RSS:

- ``read``: the drafter's weight file read in 4 MiB blocks (the I/O floor);
- ``load_all``: ``safetensors.torch.load_file`` of the whole file and the same NaN/Inf test
  on every tensor (everything in memory at once: the approach the checks avoid);
- ``structural``: :func:`pipeline.eagle3.checks.structural.structural_checks` (headers,
  every tensor streamed in blocks for NaN/Inf, d2t/t2d, 1024 lm_head rows against the
  verifier's);
- ``structural_stale``: the same on a copy whose lm_head rows are permuted, the worst case
  (mismatched rows are searched for among all 128256 verifier rows);
- ``sha256``: the digest recorded with the verification.

    python -m bench.eagle3.verify_structural [--dir /tmp/verify-bench] [--fresh]

Prints one table. The page cache is warm for every step (the files were just written or
read), so the figures compare work, not disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

H, HEADS, KV, HD, INTER = 4096, 32, 8, 128, 14336
VOCAB, DRAFT, LAYERS = 128256, 32000, 32


def llama_verifier_config() -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
            "intermediate_size": INTER, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "head_dim": HD, "num_hidden_layers": LAYERS,
            "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "max_position_embeddings": 131072, "tie_word_embeddings": False}


def build(root: Path) -> tuple[Path, Path, Path, bool]:
    import torch
    from safetensors.torch import save_file

    from pipeline.eagle3.export import eagle_config
    from pipeline.eagle3.model.drafter import DrafterConfig

    verifier, drafter, stale = root / "verifier", root / "drafter", root / "drafter-stale"
    if (stale / "model.safetensors").is_file():
        return verifier, drafter, stale, False
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    verifier.mkdir(parents=True, exist_ok=True)
    (verifier / "config.json").write_text(json.dumps(llama_verifier_config()))
    head = rand(VOCAB, H)
    save_file({"lm_head.weight": head}, str(verifier / "model.safetensors"))

    ids = torch.randperm(VOCAB, generator=g)[:DRAFT].sort().values
    d2t = ids - torch.arange(DRAFT)
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[ids] = True
    cfg = DrafterConfig.from_verifier(llama_verifier_config(), draft_vocab_size=DRAFT,
                                      aux_layer_ids=[2, LAYERS // 2, LAYERS - 3],
                                      verifier="bench/llama-3.1-8b-shaped")
    layer = {"input_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
             "hidden_norm.weight": torch.ones(H, dtype=torch.bfloat16),
             "post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
             "self_attn.q_proj.weight": rand(HEADS * HD, 2 * H),
             "self_attn.k_proj.weight": rand(KV * HD, 2 * H),
             "self_attn.v_proj.weight": rand(KV * HD, 2 * H),
             "self_attn.o_proj.weight": rand(H, HEADS * HD),
             "mlp.gate_proj.weight": rand(INTER, H), "mlp.up_proj.weight": rand(INTER, H),
             "mlp.down_proj.weight": rand(H, INTER)}
    tensors = {f"midlayer.{k}": v for k, v in layer.items()}
    tensors.update({"fc.weight": rand(H, 3 * H), "norm.weight": torch.ones(H, dtype=torch.bfloat16),
                    "lm_head.weight": head[ids].contiguous(), "d2t": d2t, "t2d": t2d})
    for d in (drafter, stale):
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(eagle_config(cfg, "bfloat16", cfg.verifier)))
    save_file(tensors, str(drafter / "model.safetensors"), metadata={"format": "pt"})
    tensors["lm_head.weight"] = tensors["lm_head.weight"][torch.randperm(DRAFT, generator=g)]
    save_file(tensors, str(stale / "model.safetensors"), metadata={"format": "pt"})
    return verifier, drafter, stale, True


# Started with cwd=ROOT: `python -c` puts its working directory first on sys.path, so each
# step measures this tree's `pipeline`.
CHILD = r"""
import json, sys, threading, time
step, drafter, verifier = sys.argv[1], sys.argv[2], sys.argv[3]
from pathlib import Path
import torch  # imported before the clock and the baseline memory, in every step
torch.set_num_threads(2)
from safetensors.torch import load_file
from pipeline.eagle3.model.checkpoint_files import VerifierInfo, sha256_files, weight_files
from pipeline.eagle3.checks.structural import structural_checks


def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "RssAnon", "RssFile"):
            out[key] = int(rest.split()[0]) / 1024
    return out


peak_anon = [status()["RssAnon"]]
done = threading.Event()


def sample():  # the kernel keeps no peak of private memory: sample it
    while not done.wait(0.005):
        peak_anon[0] = max(peak_anon[0], status()["RssAnon"])


base = status()
threading.Thread(target=sample, daemon=True).start()
t0 = time.perf_counter()
extra = {}
if step == "read":
    with open(Path(drafter) / "model.safetensors", "rb", buffering=0) as fh:
        while fh.read(1 << 22):
            pass
elif step == "load_all":
    # The non-streaming way: every tensor in memory at once, then the same NaN/Inf test.
    t = load_file(str(Path(drafter) / "model.safetensors"))
    extra["nonfinite"] = sum(int((~torch.isfinite(v.float())).sum()) for v in t.values()
                             if v.is_floating_point())
elif step.startswith("structural"):
    rep = structural_checks(Path(drafter), VerifierInfo.read(Path(verifier)))
    extra["failed"] = [c.name for c in rep.checks if not c.passed]
    extra["checks"] = len(rep.checks)
elif step == "sha256":
    extra["sha256"] = sha256_files(weight_files(Path(drafter)))[0][:12]
dt = time.perf_counter() - t0
done.set()
end = status()
peak_anon[0] = max(peak_anon[0], end["RssAnon"])
print(json.dumps({"seconds": dt, "hwm_mb": end["VmHWM"], "base_mb": base["VmHWM"],
                  "anon_peak_mb": peak_anon[0], "anon_base_mb": base["RssAnon"],
                  "file_mb": end["RssFile"], **extra}))
"""


def measure(step: str, drafter: Path, verifier: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, step, str(drafter), str(verifier)],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=Path("/tmp/verify-bench"))
    p.add_argument("--fresh", action="store_true", help="write the files again")
    args = p.parse_args(argv)
    if args.fresh and args.dir.exists():
        shutil.rmtree(args.dir)
    t0 = time.perf_counter()
    verifier, drafter, stale, written = build(args.dir)
    built = time.perf_counter() - t0
    size = (drafter / "model.safetensors").stat().st_size
    head = (verifier / "model.safetensors").stat().st_size
    # Warm the page cache for every file the steps touch.
    for f in (drafter / "model.safetensors", stale / "model.safetensors",
              verifier / "model.safetensors"):
        with open(f, "rb", buffering=0) as fh:
            while fh.read(1 << 22):
                pass
    rows = []
    for step, target in (("read", drafter), ("load_all", drafter), ("structural", drafter),
                         ("structural_stale", stale), ("sha256", drafter)):
        m = measure(step, target, verifier)
        rows.append((step, m))
    print(f"drafter {size / 1e9:.2f} GB ({drafter}), verifier head {head / 1e9:.2f} GB; "
          f"files {'written' if written else 'reused'} in {built:.1f}s; "
          f"{os.cpu_count()} CPUs, torch threads 2")
    print(f"{'step':<18} {'seconds':>8} {'GB/s':>7} {'private MB':>11} {'peak RSS MB':>12}  "
          f"result")
    for step, m in rows:
        note = ""
        if "failed" in m:
            note = (f"{m['checks']} checks, failed: {', '.join(m['failed']) or 'none'}")
        elif "sha256" in m:
            note = m["sha256"]
        elif "nonfinite" in m:
            note = f"{m['nonfinite']} NaN/Inf"
        print(f"{step:<18} {m['seconds']:8.2f} {size / 1e9 / m['seconds']:7.2f} "
              f"{m['anon_peak_mb'] - m['anon_base_mb']:11.0f} "
              f"{m['hwm_mb'] - m['base_mb']:12.0f}  {note}")
    print("private MB: peak private (anonymous) memory over the interpreter with torch "
          "loaded, sampled every 5 ms; peak RSS MB: the kernel's high-water mark over the "
          "same, page-cache pages of mapped files included")
    base = dict(rows)["read"]["seconds"]
    s = dict(rows)["structural"]["seconds"]
    print(f"structural / plain read: {s / base:.1f}x; limit 10 s: "
          f"{'met' if s < 10 and dict(rows)['structural_stale']['seconds'] < 10 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
