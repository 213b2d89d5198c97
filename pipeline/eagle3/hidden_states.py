"""Action ``eagle3.hidden_states``: run the verifier, save the aux layers and the last layer.

Input: tokenize's ``tokens.safetensors`` and the verifier. Output: ``OUT/shard-*.safetensors``
and ``OUT/index.json`` (:mod:`pipeline.eagle3.states.shards` describes the format).

Aux layers default to vLLM's ``[2, N//2, N-3]`` for an ``N``-layer verifier. Id ``k`` is the
*input* of decoder layer ``k`` (Hugging Face ``output_hidden_states[k]``); SGLang/SpecForge
configs count one lower, so pass their ids plus one.

How it stays fast on a GPU: only the body runs (no ``lm_head``); forward pre-hooks keep just
the three aux inputs (no ``output_hidden_states`` tuple); real tokens are gathered on the GPU
with a precomputed index (no host sync), copied to pinned host memory on a side stream while
the next batch runs, and a background thread writes those rows straight into their place in
the shard file (no further host copies).

Several batches are in flight on the writer's side (``--write-buffers`` pinned buffers), so
the forward only stops when the disk cannot take the bytes; the stage measures the write
bandwidth and the time the forward waited for the writer, and says when the disk is the
bottleneck (then ``train --online`` writes nothing at all).

A verifier bigger than one device: ``--device-map``/``--max-memory`` (accelerate's
placement) or ``--tp-plan auto`` under torchrun (rank 0 writes), see :mod:`pipeline.eagle3.hardware.placement`. The
memory plan is printed before loading.

``--backend vllm`` runs the verifier inside vLLM instead (its ``extract_hidden_states``
method: the checkpoint as shipped, FP8/INT4 too, ``--tensor-parallel-size``) and writes the
same shards through the same writer; :mod:`pipeline.eagle3.states.vllm_backend` holds it and is the only
module that imports vLLM, when that backend runs.

Resumable: shard boundaries are fixed by the tokens file and ``--shard-tokens``; existing
shards are checked (header, shapes, token ids, config hash) and skipped. ``--validate`` then
reads every shard back (shapes, token ids, no NaN/Inf).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, add_bool_arg, json_arg, make_parser, run_action
from pipeline.eagle3.common import (
    DTYPES,
    Progress,
    add_threads_arg,
    atomic_write_text,
    choose_aux_layers,
    config_hash,
    dtype_name,
    guard_config,
    log,
    pick_device,
    pick_dtype,
    use_threads,
    verifier_config,
)
from pipeline.eagle3.hardware.memory_plan import Workload, load_placed, measured_peaks, peaks_line
from pipeline.eagle3.hardware.placement import add_placement_args, placement_from_args
from pipeline.eagle3.plan.disk_estimate import offline_bytes
from pipeline.eagle3.states.extraction import (
    Capture,
    open_shard,
    plan_batches,
    shard_series,
    write_report,
)
from pipeline.eagle3.states.shard_writer import WRITE_METHODS, WritePipeline
from pipeline.eagle3.states.shards import INDEX, SHARD_FORMAT, shard_name, validate_shard
from pipeline.eagle3.text.datafiles import read_tokens
from pipeline.errors import ActionError

ACTION = "eagle3.hidden_states"
BACKENDS = ("hf", "vllm")
__all__ = ["Capture", "extract", "plan_batches", "plan_shards"]


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Run the verifier; save three aux layers and the last layer.")
    p.add_argument("--tokens", type=Path, required=True, help="tokenize's output directory")
    p.add_argument("--verifier", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--aux-layers", type=json_arg, default=None,
                   help="JSON list of three distinct layer ids, stored ascending as vLLM "
                        "reads them (default vLLM's [2, N//2, N-3])")
    p.add_argument("--batch-tokens", type=int, default=16384,
                   help="padded tokens per forward batch (--backend vllm: prompt tokens per "
                        "engine call)")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--shard-tokens", type=int, default=262144,
                   help="tokens per shard (fixes shard boundaries, so resume is exact)")
    p.add_argument("--limit", type=int, default=None, help="only the first N samples")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", choices=DTYPES, help="compute dtype")
    p.add_argument("--save-dtype", default="auto", choices=DTYPES,
                   help="stored dtype (auto: the compute dtype)")
    add_placement_args(p)
    p.add_argument("--write-method", choices=WRITE_METHODS, default="pwrite",
                   help="how rows reach the shard file: pwrite (one copy at a time per "
                        "file, the kernel's inode lock) or mmap (parallel copies into a "
                        "mapping)")
    p.add_argument("--write-buffers", type=int, default=4,
                   help="pinned batch buffers in flight between the verifier and the disk")
    add_bool_arg(p, "validate", True, "read every shard back and check it after extraction")
    p.add_argument("--backend", choices=BACKENDS, default="hf",
                   help="hf: the verifier in transformers (placement flags above); vllm: "
                        "inside vLLM with its extract_hidden_states method, the checkpoint "
                        "as shipped (FP8/INT4 too), same shards")
    v = p.add_argument_group("--backend vllm")
    v.add_argument("--tensor-parallel-size", type=int, default=1,
                   help="GPUs vLLM shards the verifier over")
    v.add_argument("--gpu-memory-utilization", type=float, default=0.85,
                   help="share of each GPU vLLM may take (weights, KV and states cache)")
    v.add_argument("--engine-scratch", type=Path, default=None,
                   help="where vLLM's connector writes each request's states before they "
                        "go into the shards (default: a directory in /dev/shm, else beside "
                        "the shards)")
    v.add_argument("--engine-args", type=json_arg, default=None,
                   help='JSON object of further vllm.LLM arguments, e.g. {"quantization": '
                        '"fp8", "enable_expert_parallel": true}')
    add_bool_arg(v, "enforce-eager", False,
                 "skip vLLM's torch.compile and CUDA graphs (faster start, slower run)")
    add_bool_arg(v, "trust-remote-code", False, "let vLLM run the checkpoint's own code")
    add_threads_arg(p)
    return p


def plan_shards(offsets: Any, n: int, shard_tokens: int) -> list[tuple[int, int]]:
    """``[(first_sample, end_sample), ...]`` cutting after ``shard_tokens`` tokens."""
    plan, start, acc = [], 0, 0
    for i in range(n):
        acc += int(offsets[i + 1] - offsets[i])
        if acc >= shard_tokens:
            plan.append((start, i + 1))
            start, acc = i + 1, 0
    if start < n:
        plan.append((start, n))
    return plan


def run(args: argparse.Namespace) -> StageResult:
    result = StageResult(action=ACTION)
    verifier = Path(args.verifier)
    vcfg = verifier_config(verifier)
    n_layers, hidden = int(vcfg["num_hidden_layers"]), int(vcfg["hidden_size"])
    aux_layers, note = choose_aux_layers(args.aux_layers, n_layers, str(verifier / "config.json"))
    if note:
        log(f"[hidden_states] {note}")
    if args.write_buffers < 2:
        raise ActionError(f"--write-buffers must be at least 2, got {args.write_buffers}")
    tokens = read_tokens(Path(args.tokens))
    if tokens["vocab_size"] != int(vcfg["vocab_size"]):
        raise ActionError(f"tokens are for a vocab of {tokens['vocab_size']}, the verifier "
                          f"has {vcfg['vocab_size']}", where=str(tokens["path"]))
    n = len(tokens["ids"]) if args.limit is None else min(args.limit, len(tokens["ids"]))
    engine = args.backend == "vllm"
    if engine:
        from pipeline.eagle3.states import vllm_backend

        vllm_backend.check_args(args)
        placement = None
        device = pick_device(args.device)
    else:
        if args.tensor_parallel_size != 1:
            raise ActionError("--tensor-parallel-size is for --backend vllm",
                              hint="--backend hf spreads a verifier with --tp-plan auto under "
                                   "torchrun, or --device-map")
        placement = placement_from_args(args, pick_device(args.device))
        device = placement.device
    dtype = pick_dtype(args.dtype, device)
    save_dtype = dtype if args.save_dtype == "auto" else pick_dtype(args.save_dtype, device)
    out = Path(args.out)
    tok_digest = hashlib.sha256(Path(tokens["path"]).read_bytes()).hexdigest()[:16]
    cfg = {"verifier": str(verifier), "verifier_config": vcfg, "aux_layers": aux_layers,
           "tokens_sha": tok_digest, "samples": n, "shard_tokens": args.shard_tokens,
           "save_dtype": dtype_name(save_dtype)}
    writes = engine or placement.writes
    if not writes:
        args.result = None
    digest = guard_config(out, cfg, stage=ACTION) if writes else config_hash(cfg)

    offsets = tokens["offsets"]
    plan = plan_shards(offsets, n, args.shard_tokens)
    done: list[int] = []
    for i in range(len(plan)):
        path = out / shard_name(i)
        if path.exists():
            validate_shard(path, tokens=tokens, hidden_size=hidden, aux_layers=aux_layers,
                           config_hash=digest, full=False)
            done.append(i)
    todo = [i for i in range(len(plan)) if i not in done]
    if writes:
        log(f"[hidden_states] {n} samples in {len(plan)} shard(s), {len(done)} done; aux "
            f"layers {aux_layers} of {n_layers}; {dtype_name(dtype)}, "
            f"{placement.describe() if placement else 'vLLM'}")

    index = {"format": SHARD_FORMAT, "config_hash": digest, "aux_layers": aux_layers,
             "hidden_size": hidden, "num_layers": n_layers,
             "vocab_size": int(vcfg["vocab_size"]), "verifier": str(verifier),
             "tokens": str(tokens["path"]), "dtype": dtype_name(save_dtype),
             "total_samples": n, "backend": args.backend, "shards": []}

    def write_index(finished: list[int]) -> None:
        index["shards"] = [{"file": shard_name(i), "sample_start": plan[i][0],
                            "num_samples": plan[i][1] - plan[i][0],
                            "tokens": int(offsets[plan[i][1]] - offsets[plan[i][0]])}
                           for i in sorted(finished)]
        atomic_write_text(out / INDEX, json.dumps(index, indent=2))

    finished = list(done)
    if todo:
        longest = max(int(offsets[i + 1] - offsets[i]) for i in range(n))
        seq = min(longest, args.batch_tokens)
        work = Workload(batch=max(1, min(args.max_batch_size, args.batch_tokens // seq)),
                        seq=seq, captured=len(aux_layers) + 1)

        def on_shard(i: int) -> None:
            finished.append(i)
            write_index(finished)

        if engine:  # vLLM places and loads the verifier in its own processes
            result.metrics.update(vllm_backend.run_engine(
                verifier, vcfg, tokens, plan, todo, aux_layers, out, digest, dtype,
                save_dtype, args, on_shard, device, longest))
        else:
            placed = load_placed(verifier, dtype, placement, work, log)
            result.metrics["memory_plan"] = placed.plan.to_json()
            result.metrics.update(extract(placed.model, tokens, plan, todo, aux_layers, out,
                                          digest, placed.input_device, save_dtype, args,
                                          on_shard=on_shard, writes=writes))
            peaks = measured_peaks()
            if peaks:
                result.metrics["device_peak_gib"] = peaks
                if writes:
                    log(f"[hidden_states] {peaks_line(peaks, placed.plan)}")
    if not writes:
        return result
    write_index(finished)

    if args.validate:
        for i in range(len(plan)):
            validate_shard(out / shard_name(i), tokens=tokens, hidden_size=hidden,
                           aux_layers=aux_layers, config_hash=digest, full=True)
        result.check("validated", True, value=len(plan),
                     message="shapes, token ids and finite values of every shard")
    total_tokens = int(offsets[n])
    result.metrics.update(samples=n, tokens=total_tokens, shards=len(plan),
                          resumed_shards=len(done), aux_layers=aux_layers,
                          offline_bytes=offline_bytes(total_tokens, hidden, save_dtype.itemsize,
                                                      len(aux_layers)))
    result.check("complete", len(finished) == len(plan), value=len(finished),
                 expected=len(plan))
    result.artifacts.append(str(out / INDEX))
    rate = result.metrics.get("tokens_per_s")
    result.summary = (f"hidden_states: {n} samples, {total_tokens} tokens, {len(plan)} shards"
                      + (f", {rate:.0f} tokens/s" if rate else " (all resumed)")
                      + (f", writes {result.metrics['write_gb_s']:.2f} GB/s"
                         if result.metrics.get("write_gb_s") else ""))
    return result




def extract(model: Any, tokens: dict[str, Any], plan: list[tuple[int, int]], todo: list[int],
            aux_layers: list[int], out: Path, digest: str, device: Any, save_dtype: Any,
            args: argparse.Namespace, on_shard, writes: bool = True) -> dict[str, Any]:
    """Run the verifier over the ``todo`` shards of ``plan`` and write them.

    Per batch, on the GPU: body forward with the capture hooks, gather the real tokens with a
    precomputed index (no host sync), cast, and copy into a pinned buffer on a side stream.
    On the writer's side (:class:`pipeline.eagle3.states.shard_writer.WritePipeline`): wait for that copy, write
    the rows into the shard file, give the buffer back. ``device`` is where the inputs go
    and the states gather (the embedding's device under a device map). ``writes`` False
    (tensor-parallel ranks other than 0) runs the forwards only.
    """
    import torch

    hidden = model.config.hidden_size
    capture = Capture(model, aux_layers, out_device=device)
    on_gpu = device.type == "cuda"
    copy_stream = torch.cuda.Stream(device) if on_gpu and writes else None
    offsets, input_ids = tokens["offsets"], tokens["input_ids"]
    cap = args.batch_tokens
    method = getattr(args, "write_method", "pwrite")
    n_bufs = max(2, int(getattr(args, "write_buffers", 4)))
    pipeline = WritePipeline([
        (torch.empty(cap, 3 * hidden, dtype=save_dtype, pin_memory=on_gpu),
         torch.empty(cap, hidden, dtype=save_dtype, pin_memory=on_gpu))
        for _ in range(n_bufs if writes else 0)])
    total = sum(int(offsets[plan[i][1]] - offsets[plan[i][0]]) for i in todo)
    progress = Progress("hidden_states", total=sum(plan[i][1] - plan[i][0] for i in todo),
                        every=5.0 if writes else float("inf"))
    bad_flag = torch.zeros((), dtype=torch.bool, device=device)

    try:
        with torch.no_grad():
            for shard in todo:
                s, e = plan[shard]
                lengths = [int(offsets[i + 1] - offsets[i]) for i in range(s, e)]
                if max(lengths) > cap:
                    raise ActionError(f"a sample of {max(lengths)} tokens exceeds "
                                      f"--batch-tokens {cap}", where=str(tokens["path"]))
                batches = plan_batches(lengths, cap, args.max_batch_size)
                order = [s + j for batch in batches for j in batch]
                writer = None
                if writes:
                    writer = open_shard(out, shard, (s, e), order, tokens, digest=digest,
                                        aux_layers=aux_layers, hidden=hidden,
                                        save_dtype=save_dtype, method=method,
                                        stats=pipeline.stats)
                cursor = 0
                for batch in batches:
                    sample_ids = [s + j for j in batch]
                    width = max(lengths[j] for j in batch)
                    ids = torch.zeros(len(batch), width, dtype=torch.long)
                    flat: list[int] = []
                    for r, i in enumerate(sample_ids):
                        a, b = int(offsets[i]), int(offsets[i + 1])
                        ids[r, : b - a] = input_ids[a:b].long()
                        flat.extend(range(r * width, r * width + b - a))
                    t = len(flat)
                    ids = ids.to(device, non_blocking=True)
                    aux, last = capture(ids)
                    progress.update(len(batch), t)
                    if writer is None:
                        continue
                    flat_idx = torch.tensor(flat, dtype=torch.long).to(device, non_blocking=True)
                    aux_rows = torch.cat([h.reshape(-1, hidden).index_select(0, flat_idx)
                                          for h in aux], dim=1).to(save_dtype)
                    last_rows = last.reshape(-1, hidden).index_select(0, flat_idx).to(save_dtype)
                    bad_flag |= ~(torch.isfinite(aux_rows).all() & torch.isfinite(last_rows).all())
                    aux_buf, last_buf = pipeline.buffer()
                    event = None
                    if copy_stream is not None:
                        copy_stream.wait_stream(torch.cuda.current_stream(device))
                        with torch.cuda.stream(copy_stream):
                            aux_buf[:t].copy_(aux_rows, non_blocking=True)
                            last_buf[:t].copy_(last_rows, non_blocking=True)
                            aux_rows.record_stream(copy_stream)
                            last_rows.record_stream(copy_stream)
                            event = torch.cuda.Event()
                            event.record(copy_stream)
                    else:
                        aux_buf[:t].copy_(aux_rows)
                        last_buf[:t].copy_(last_rows)
                    pipeline.rows(writer, cursor, t, (aux_buf, last_buf), event)
                    cursor += t
                if writer is None:
                    continue
                if bool(bad_flag):  # one host sync per shard, not per batch
                    raise ActionError(f"NaN or Inf in the verifier's hidden states for samples "
                                      f"{s}..{e - 1}", where=str(args.verifier))

                def finish(writer=writer, shard=shard, n=e - s):
                    on_shard(shard)
                    log(f"[hidden_states] wrote {writer.path.name} ({n} samples)")
                    shard_series(shard + 1, progress, pipeline.stats.bytes)

                pipeline.finish(writer, finish)
    finally:
        try:
            pipeline.close()
        finally:
            capture.remove()
    elapsed = progress.elapsed
    if writes:
        log(progress.line())
    stats: dict[str, Any] = {"tokens_per_s": round(total / elapsed, 1) if elapsed else None,
                             "extract_seconds": round(elapsed, 2)}
    if writes:
        stats.update(write_report(pipeline, elapsed, method))
    return stats


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv, setup=use_threads)


if __name__ == "__main__":
    raise SystemExit(main())
