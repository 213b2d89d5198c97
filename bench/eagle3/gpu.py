#!/usr/bin/env python3
"""EAGLE-3 stages on the GPU: extraction overhead and drafter-training MFU, in one table.

Every figure is measured in the same run against its own baseline:

- ``matmul``: a bf16 8192^3 matrix product, the ceiling MFU is quoted against;
- ``extract``: a Llama-3.2-1B-shaped verifier (random weights, bf16, sdpa) over B x S random
  tokens: the body's plain forward, then the stage's capture (hooks, gather, copy to pinned
  memory on a side stream) and the stage's whole ``extract`` (the same plus writing shards,
  with each write method, to disk and to /dev/shm; the writer's own bandwidth and the share
  of time the forward waited for it come from the stage's measurements); overhead is
  against the plain forward of the same batches;
- ``train``: one drafter training step at the EAGLE-3 shape (H 2048, draft vocab 32k,
  target vocab 128k) with the stage's own ``TTTLoss``: bf16 autocast, fused AdamW, fp32 loss;
  MFU counts the FLOPs the step must do (trainable layers x3, the frozen lm_head x2 since
  it needs no weight gradient, the target logits x1, causal attention) over the matmul rate;
- ``loader``: reading training batches back from the shards ``extract`` wrote;
- ``online``: offline (extract writing shards, then training steps on batches read back)
  against online (the verifier's capture feeding each training step) on the same batches,
  tokens/s end to end for one epoch, and the epoch count from which offline's one-time
  extraction pays for itself;
- ``ddp``: the training step under DDP on every visible GPU (``torchrun``), tokens/s summed.

    python -m bench.eagle3.gpu [--out DIR] [--tiny]
                               [--sections matmul,extract,train,loader,online,ddp]

``--tiny`` runs small shapes on the CPU: a smoke test of this script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[2]

LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
                max_position_embeddings=131072, tie_word_embeddings=True)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=7,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
            rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=True)


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, warmup: int, iters: int) -> float:
    """Median seconds per call (CUDA events on a GPU)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def bench_matmul(device, tiny: bool) -> dict:
    n = 512 if tiny else 8192
    dtype = torch.float32 if tiny else torch.bfloat16
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    t = timed(lambda: a @ b, device, 3, 10)
    return {"name": "matmul", "config": f"{n}^3 {str(dtype)[6:]}", "ms": t * 1e3,
            "tflops": 2 * n ** 3 / t / 1e12}


def llama_forward_flops(cfg: dict, seq: int) -> float:
    """Forward FLOPs per token of the body (no lm_head), causal attention averaged."""
    h, i, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    linear = h * q + 2 * h * kv + q * h + 3 * h * i
    attn = 2 * q * (seq + 1) / 2  # QK^T and PV over the average causal context
    return 2 * layers * (linear + attn)


def make_verifier(cfg: dict, device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**cfg, attn_implementation="sdpa"))
    return model.to(dtype).eval()


def verifier_and_batches(tiny: bool, device, batch: int, seq: int, iters: int, seed: int):
    """The bench's verifier (random weights), its aux layers and ``iters`` random batches
    of B x S ids on the CPU, as the extract and online sections both start."""
    from pipeline.eagle3.common import default_aux_layers

    cfg = TINY if tiny else LLAMA_1B
    dtype = torch.float32 if tiny else torch.bfloat16
    model = make_verifier(cfg, device, dtype)
    g = torch.Generator().manual_seed(seed)
    batches = [torch.randint(0, cfg["vocab_size"], (batch, seq), generator=g)
               for _ in range(iters)]
    return cfg, dtype, model, default_aux_layers(cfg["num_hidden_layers"]), batches


def bench_extract(device, tiny: bool, batch: int, seq: int, iters: int, workdir: Path,
                  targets: list[Path], repeats: int = 3) -> list:
    from pipeline.eagle3.hidden_states import extract
    from pipeline.eagle3.states.extraction import Capture

    cfg, dtype, model, aux_layers, batches = verifier_and_batches(tiny, device, batch, seq,
                                                                  iters, seed=1)
    hidden = cfg["hidden_size"]
    dev_batches = [b.to(device) for b in batches]
    tokens = batch * seq * iters
    flops = llama_forward_flops(cfg, seq) * tokens

    def plain():
        with torch.no_grad():
            for b in dev_batches:
                model.model(input_ids=b, use_cache=False)

    t_plain = timed(plain, device, 1, 3)

    capture = Capture(model, aux_layers)
    pinned = [(torch.empty(batch * seq, 3 * hidden, dtype=dtype, pin_memory=device.type == "cuda"),
               torch.empty(batch * seq, hidden, dtype=dtype, pin_memory=device.type == "cuda"))
              for _ in range(2)]
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    flat_idx = torch.arange(batch * seq, device=device)

    def capture_only():
        with torch.no_grad():
            for n, b in enumerate(dev_batches):
                aux, last = capture(b)
                a = torch.cat([x.reshape(-1, hidden).index_select(0, flat_idx) for x in aux], 1)
                l_ = last.reshape(-1, hidden).index_select(0, flat_idx)
                abuf, lbuf = pinned[n % 2]
                if stream is not None:
                    stream.wait_stream(torch.cuda.current_stream(device))
                    with torch.cuda.stream(stream):
                        abuf.copy_(a, non_blocking=True)
                        lbuf.copy_(l_, non_blocking=True)
                        a.record_stream(stream)
                        l_.record_stream(stream)
                else:
                    abuf.copy_(a)
                    lbuf.copy_(l_)
            sync(device)

    t_capture = timed(capture_only, device, 1, 3)
    capture.remove()

    # The stage's own extract(), writing real shards (to disk, and to memory when the
    # machine has /dev/shm, which separates the disk's speed from the code's).
    flat = torch.cat([b.flatten() for b in batches])
    offsets = torch.arange(0, tokens + 1, seq, dtype=torch.int64)
    tok = {"offsets": offsets, "input_ids": flat.to(torch.int32),
           "loss_mask": torch.ones(tokens, dtype=torch.uint8), "path": workdir / "tokens"}
    n_samples = batch * iters
    plan = [(0, n_samples)]
    args = SimpleNamespace(batch_tokens=batch * seq, max_batch_size=batch, verifier="bench",
                           write_method="pwrite", write_buffers=4)
    shape = f"{'tiny' if tiny else 'Llama-3.2-1B'} B={batch} S={seq} x{iters}"
    rows = [
        {"name": "extract: plain forward", "config": shape, "ms": t_plain * 1e3 / iters,
         "tokens_s": tokens / t_plain, "tflops": flops / t_plain / 1e12},
        {"name": "extract: capture + copy to pinned", "config": shape,
         "ms": t_capture * 1e3 / iters, "tokens_s": tokens / t_capture,
         "overhead": t_capture / t_plain - 1}]
    from pipeline.eagle3.states.shards import INDEX, SHARD_FORMAT

    # Each run writes a new directory, and the previous run's bytes are flushed and deleted
    # before the clock starts: a run that replaces a file whose pages are still being
    # written back waits for that writeback, which is the earlier run's cost, not its own.
    for target, method in [(t, m) for t in targets for m in ("pwrite", "mmap")]:
        args.write_method = method
        where = "memory" if str(target).startswith("/dev/shm") else "disk"
        runs: list[tuple[float, dict]] = []
        for n in range(1 + repeats):  # the first is a warm-up (allocations, first file)
            out = target / f"hidden-{method}-{n}"
            out.mkdir(parents=True, exist_ok=True)
            os.sync()
            sync(device)
            t0 = time.perf_counter()
            stats = extract(model, tok, plan, [0], aux_layers, out, "bench", device, dtype,
                            args, on_shard=lambda i: None)
            sync(device)
            if n:
                runs.append((time.perf_counter() - t0, stats))
            size = (out / "shard-00000.safetensors").stat().st_size
            if n < repeats:
                shutil.rmtree(out)
        (out / INDEX).write_text(json.dumps({  # what the stage writes, for the loader
            "format": SHARD_FORMAT, "config_hash": "bench", "aux_layers": aux_layers,
            "hidden_size": hidden, "shards": [{"file": "shard-00000.safetensors",
                                               "sample_start": 0, "num_samples": n_samples,
                                               "tokens": tokens}]}))
        if where == "disk" and method == "pwrite":
            shutil.rmtree(target / "hidden", ignore_errors=True)
            out.rename(target / "hidden")  # the loader section reads this one
        runs.sort(key=lambda r: r[0])
        t_extract, stats = runs[len(runs) // 2]
        spread = (f"; {len(runs)} runs {tokens / runs[-1][0]:,.0f}-{tokens / runs[0][0]:,.0f}"
                  if len(runs) > 1 else "")
        rows.append({"name": f"extract: stage extract() + shards to {where} ({method})",
                     "config": shape, "ms": t_extract * 1e3 / iters,
                     "tokens_s": tokens / t_extract, "overhead": t_extract / t_plain - 1,
                     "runs_tokens_s": [tokens / r[0] for r in runs],
                     "note": f"{size / 1e9:.2f} GB, {size / t_extract / 1e9:.1f} GB/s end to "
                             f"end; writer {stats.get('write_gb_s') or 0:.1f} GB/s, forward "
                             f"waited {stats.get('write_stall_share') or 0:.0%}{spread}"})
    return rows


def drafter_cfg(tiny: bool, draft_vocab: int):
    from pipeline.eagle3.model.drafter import DrafterConfig

    cfg = TINY if tiny else LLAMA_1B
    return DrafterConfig.from_verifier({**cfg, "architectures": ["LlamaForCausalLM"]},
                                       draft_vocab_size=draft_vocab,
                                       aux_layer_ids=[2, 8, 13], verifier="bench")


def train_flops_per_token(cfg, steps: int, seq: int) -> float:
    """FLOPs a training step must do per token (see the module docstring)."""
    h, i, d = cfg.hidden_size, cfg.intermediate_size, cfg.draft_vocab_size
    q = cfg.num_attention_heads * cfg.head_dim
    kv = cfg.num_key_value_heads * cfg.head_dim
    fc = 2 * 3 * cfg.target_hidden_size * h
    layer = 2 * (2 * h * q + 2 * 2 * h * kv + q * h + 3 * h * i)
    attn = 2 * 2 * q * (seq + 1) / 2
    head = 2 * h * d
    return 3 * (fc + steps * (layer + attn)) + steps * 2 * head + head


def make_drafter(tiny: bool, device):
    """A drafter at the bench shape with seeded random weights and a random draft vocab."""
    from pipeline.eagle3.model.drafter import Eagle3Drafter

    draft_vocab = 256 if tiny else 32000
    cfg = drafter_cfg(tiny, draft_vocab)
    torch.manual_seed(0)
    drafter = Eagle3Drafter(cfg)
    with torch.no_grad():
        ids = torch.sort(torch.randperm(cfg.vocab_size)[:draft_vocab]).values
        drafter.d2t.copy_(ids - torch.arange(draft_vocab))
        drafter.t2d[ids] = True
        drafter.lm_head.weight.normal_(0, 0.02)
        drafter.embed_tokens.weight.normal_(0, 0.02)
    return drafter.to(device)


def make_trainer(tiny: bool, steps: int, device, attn: str, compile_loss_on: bool,
                 blocks: bool = False, ddp: bool = False):
    """(train(aux, last, input_ids, mask) -> loss, drafter config): one optimiser step of
    the stage's own TTTLoss under bf16 autocast, fused AdamW, grad clip 0.5."""
    from pipeline.eagle3.training import ttt

    drafter = make_drafter(tiny, device)
    cfg, draft_vocab = drafter.config, drafter.config.draft_vocab_size
    ttt.compile_loss(compile_loss_on)
    if blocks:
        drafter.compile_blocks()
    target_head = torch.randn(draft_vocab, cfg.hidden_size, device=device) * 0.02
    model = ttt.TTTLoss(drafter, target_head, steps, attn_impl=attn)
    if ddp:
        from pipeline.eagle3.hardware.distributed import wrap_ddp

        model = wrap_ddp(model, device.index)
    params = drafter.trainable_parameters()
    opt = torch.optim.AdamW(params, lr=1e-4, fused=device.type == "cuda")
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else torch.autocast("cpu", enabled=False))

    def train(aux, last, input_ids, mask):
        with autocast:
            loss, _, _ = model(aux, last, input_ids, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return train, cfg


def make_train_step(tiny: bool, steps: int, batch: int, seq: int, device, attn: str,
                    compile_loss_on: bool, blocks: bool = False, ddp: bool = False):
    """A no-argument training step on one fixed random batch of B x S."""
    train, cfg = make_trainer(tiny, steps, device, attn, compile_loss_on, blocks, ddp)
    g = torch.Generator().manual_seed(2)
    dt = torch.float32 if tiny else torch.bfloat16
    aux = torch.randn(batch, seq, 3 * cfg.hidden_size, generator=g).to(device, dt)
    last = torch.randn(batch, seq, cfg.hidden_size, generator=g).to(device, dt)
    input_ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g).to(device)
    mask = torch.ones(batch, seq, dtype=torch.uint8, device=device)
    return (lambda: train(aux, last, input_ids, mask)), cfg


def bench_train(device, tiny: bool, batch: int, seq: int, variants: list, peak: float,
                deadline: float) -> list:
    rows = []
    for steps, attn, comp, blocks in variants:
        label = (f"train step ttt={steps} attn={attn} loss={'compiled' if comp else 'eager'}"
                 f" blocks={'compiled' if blocks else 'eager'}")
        if time.perf_counter() > deadline:
            rows.append({"name": label, "config": "", "note": "skipped: out of time"})
            continue
        try:
            step, cfg = make_train_step(tiny, steps, batch, seq, device, attn, comp, blocks)
            t = timed(step, device, 3, 8)
            tokens = batch * seq
            flops = train_flops_per_token(cfg, steps, seq) * tokens
            mem = torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else 0
            rows.append({"name": label, "config": f"H {cfg.hidden_size} D {cfg.draft_vocab_size} B={batch} "
                                   f"S={seq}", "ms": t * 1e3, "tokens_s": tokens / t,
                         "tflops": flops / t / 1e12, "mfu": flops / t / 1e12 / peak,
                         "note": f"peak mem {mem:.0f} GiB" if mem else ""})
        except Exception as exc:  # a variant that cannot run here is reported, not fatal
            rows.append({"name": label, "config": "", "note": f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"})
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
    return rows


def bench_online(device, tiny: bool, batch: int, seq: int, iters: int, workdir: Path) -> list:
    """Offline (the stage's extract() writing shards, then training steps on batches read
    back from them) against online (the verifier's capture feeding each training step), on
    the same random batches, one epoch; tokens/s end to end."""
    from pipeline.eagle3.hidden_states import extract
    from pipeline.eagle3.states.extraction import Capture
    from pipeline.eagle3.states.shards import INDEX, SHARD_FORMAT
    from pipeline.eagle3.training.train_data import TrainData

    cfg, dtype, model, aux_layers, batches = verifier_and_batches(tiny, device, batch, seq,
                                                                  iters, seed=3)
    hidden = cfg["hidden_size"]
    tokens = batch * seq * iters
    train, _ = make_trainer(tiny, 3, device, "sdpa", True, blocks=not tiny)
    mask = torch.ones(batch, seq, dtype=torch.uint8, device=device)
    capture = Capture(model, aux_layers, out_device=device)

    def online_epoch():
        for b in batches:
            ids = b.to(device)
            with torch.no_grad():
                aux, last = capture(ids)
            train(torch.cat(aux, -1), last, ids, mask)
        sync(device)

    online_epoch()  # warm-up: compiles, allocations
    t0 = time.perf_counter()
    online_epoch()
    t_on = time.perf_counter() - t0
    capture.remove()

    out = workdir / "online-bench"
    out.mkdir(parents=True, exist_ok=True)
    flat = torch.cat([b.flatten() for b in batches])
    tok = {"offsets": torch.arange(0, tokens + 1, seq, dtype=torch.int64),
           "input_ids": flat.to(torch.int32), "loss_mask": torch.ones(tokens, dtype=torch.uint8),
           "path": workdir / "tokens"}
    args = SimpleNamespace(batch_tokens=batch * seq, max_batch_size=batch, verifier="bench",
                           write_method="pwrite", write_buffers=4)
    sync(device)
    t0 = time.perf_counter()
    stats = extract(model, tok, [(0, batch * iters)], [0], aux_layers, out, "bench", device,
                    dtype, args, on_shard=lambda i: None)
    (out / INDEX).write_text(json.dumps({
        "format": SHARD_FORMAT, "config_hash": "bench", "aux_layers": aux_layers,
        "hidden_size": hidden, "shards": [{"file": "shard-00000.safetensors", "sample_start": 0,
                                           "num_samples": batch * iters, "tokens": tokens}]}))
    t_extract = time.perf_counter() - t0
    data = TrainData(out, seed=0, holdout=0.0, max_length=seq)
    t0 = time.perf_counter()
    for batch_ids in data.epoch_batches(0, batch, batch * seq):
        b = data.load(batch_ids, pin=device.type == "cuda").to(device)
        train(b.aux, b.last, b.input_ids, b.loss_mask)
    sync(device)
    t_train = time.perf_counter() - t0
    shape = f"{'tiny' if tiny else 'Llama-3.2-1B'} B={batch} S={seq} x{iters}"
    gap = t_on - t_train
    epochs = f"offline wins from {t_extract / gap:.1f} epochs on" if gap > 0 else \
        "online is faster at any epoch count"
    return [
        {"name": "online: capture + train step, 1 epoch", "config": shape,
         "ms": t_on * 1e3 / iters, "tokens_s": tokens / t_on, "note": "no shards"},
        {"name": "offline: extract + train on shards, 1 epoch", "config": shape,
         "ms": (t_extract + t_train) * 1e3 / iters, "tokens_s": tokens / (t_extract + t_train),
         "note": f"extract {t_extract:.1f}s ({stats.get('written_gb')} GB at "
                 f"{stats.get('write_gb_s')} GB/s) + train {t_train:.1f}s; {epochs}"}]


def bench_loader(workdir: Path, seq: int) -> list:
    from pipeline.eagle3.training.train_data import Prefetcher, TrainData

    data = TrainData(workdir / "hidden", seed=0, holdout=0.0, max_length=seq)
    batches = data.epoch_batches(0, 4, 4 * seq)
    rows = []
    for workers in (1, 4):
        t0 = time.perf_counter()
        n = 0
        pre = Prefetcher(data, batches, pin=torch.cuda.is_available(), workers=workers)
        for b in pre:
            n += b.tokens
        pre.close()
        dt = time.perf_counter() - t0
        rows.append({"name": f"loader: shards -> pinned batches, {workers} thread(s)",
                     "config": f"B=4 S={seq}", "tokens_s": n / dt,
                     "ms": dt * 1e3 / max(1, len(batches))})
    return rows


def ddp_worker(args) -> None:
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    step, _ = make_train_step(False, args.ttt, args.train_batch, args.seq, device,
                              args.ddp_attn, True, blocks=True, ddp=True)
    t = timed(step, device, 3, 8)
    tokens = torch.tensor([args.train_batch * args.seq / t], device=device)
    dist.all_reduce(tokens)
    if rank == 0:
        Path(args.ddp_out).write_text(json.dumps({"world": world, "tokens_s": float(tokens),
                                                  "ms": t * 1e3}))
    dist.destroy_process_group()


def bench_ddp(args, single_tokens_s: float | None) -> list:
    gpus = torch.cuda.device_count()
    if gpus < 2:
        return [{"name": "ddp", "config": "", "note": f"skipped: {gpus} GPU visible"}]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(tempfile.mkdtemp()) / "ddp.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={gpus}",
           "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "bench.eagle3.gpu",
           "--ddp-worker",
           "--ddp-out", str(out), "--ttt", str(args.ttt), "--ddp-attn", args.ddp_attn,
           "--train-batch",
           str(args.train_batch), "--seq", str(args.seq)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NCCL_NVLS_ENABLE": "0",
           "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    if proc.returncode != 0 or not out.exists():
        return [{"name": f"ddp x{gpus}", "config": "",
                 "note": f"failed: {proc.stderr.strip().splitlines()[-1][:100] if proc.stderr else proc.returncode}"}]
    r = json.loads(out.read_text())
    scaling = r["tokens_s"] / (gpus * single_tokens_s) if single_tokens_s else None
    return [{"name": f"ddp train step ttt={args.ttt} attn={args.ddp_attn}, {gpus} GPUs",
             "config":
             f"B={args.train_batch}/GPU S={args.seq}", "ms": r["ms"], "tokens_s": r["tokens_s"],
             "note": f"scaling efficiency {scaling:.0%}" if scaling else ""}]


def print_table(rows: list, peak: float | None) -> None:
    print(f"\n{'measurement':<62} {'shape':<30} {'ms/iter':>8} {'tokens/s':>10} "
          f"{'TFLOP/s':>8} {'MFU':>6} {'overhead':>8}  note")
    def f(r, key, fmt):
        return format(r[key], fmt) if r.get(key) is not None else ""

    for r in rows:
        mfu = r.get("mfu") if r.get("mfu") is not None else (
            r["tflops"] / peak if r.get("tflops") and peak and r["name"] != "matmul" else None)
        print(f"{r['name']:<62} {r.get('config', ''):<30} {f(r, 'ms', '8.1f'):>8} "
              f"{f(r, 'tokens_s', '10.0f'):>10} {f(r, 'tflops', '8.1f'):>8} "
              f"{format(mfu, '6.1%') if mfu is not None else '':>6} "
              f"{format(r['overhead'], '+8.1%') if r.get('overhead') is not None else '':>8}  "
              f"{r.get('note', '')}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--sections", default="matmul,extract,train,loader,online,ddp")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--batch", type=int, default=8, help="extraction batch")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--iters", type=int, default=6, help="extraction batches")
    p.add_argument("--train-batch", type=int, default=4)
    p.add_argument("--ttt", type=int, default=3, help="TTT steps for the ddp section")
    p.add_argument("--variants", default="3:sdpa:1:1,3:flex:1:1",
                   help="train variants steps:attn:compiled_loss:compiled_blocks, run first")
    p.add_argument("--late-variants", default="7:sdpa:1:1,7:flex:1:1",
                   help="train variants run after the ddp section, while time is left")
    p.add_argument("--ddp-attn", default="flex")
    p.add_argument("--budget", type=float, default=400.0,
                   help="seconds after which remaining train variants are skipped")
    p.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ddp-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ddp_worker:
        ddp_worker(args)
        return 0
    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    if args.tiny:
        args.batch, args.seq, args.iters, args.train_batch = 2, 64, 3, 2
    sections = set(args.sections.split(","))
    t_start = time.perf_counter()
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {name}, {torch.cuda.device_count()} GPU(s)", flush=True)
    rows: list = []
    workdir = Path(tempfile.mkdtemp(prefix="eagle3-bench-"))
    peak = None

    def save():
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "eagle3_gpu.json").write_text(json.dumps(
                {"device": name, "torch": torch.__version__, "rows": rows}, indent=2))

    if "matmul" in sections:
        rows.append(bench_matmul(device, args.tiny))
        peak = rows[-1]["tflops"]
        print(f"matmul {peak:.0f} TFLOP/s", flush=True)
        save()
    if "extract" in sections:
        targets = [workdir] + ([Path(tempfile.mkdtemp(dir="/dev/shm"))]
                               if Path("/dev/shm").is_dir() and not args.tiny else [])
        rows += bench_extract(device, args.tiny, args.batch, args.seq, args.iters, workdir,
                              targets)
        print(rows[-1], flush=True)
        save()
    deadline = t_start + args.budget

    def variants(text):
        return [(int(a), b, c == "1", d == "1") for a, b, c, d in
                (v.split(":") for v in text.split(",") if v)]

    single = None
    if "train" in sections:
        train_rows = bench_train(device, args.tiny, args.train_batch, args.seq,
                                 variants(args.variants), peak or 1.0, deadline)
        rows += train_rows
        single = next((r["tokens_s"] for r in train_rows if r.get("tokens_s") and
                       r["name"].startswith(f"train step ttt={args.ttt} attn={args.ddp_attn}")),
                      None)
        print(train_rows, flush=True)
        save()
    if "online" in sections:
        rows += bench_online(device, args.tiny, args.train_batch, args.seq, args.iters, workdir)
        save()
    if "loader" in sections and (workdir / "hidden").exists():
        rows += bench_loader(workdir, args.seq)
        save()
    if "ddp" in sections and device.type == "cuda":
        rows += bench_ddp(args, single)
        save()
    if "train" in sections and args.late_variants:
        rows += bench_train(device, args.tiny, args.train_batch, args.seq,
                            variants(args.late_variants), peak or 1.0, deadline)
        save()
    print_table(rows, peak)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
