"""Action ``eagle3.hidden_states``: run the verifier, save the aux layers and the last layer.

Input: tokenize's ``tokens.safetensors`` and the verifier. Output: ``OUT/shard-*.safetensors``
and ``OUT/index.json`` (:mod:`.shards` describes the format).

Aux layers default to vLLM's ``[2, N//2, N-3]`` for an ``N``-layer verifier. Id ``k`` is the
*input* of decoder layer ``k`` (Hugging Face ``output_hidden_states[k]``); SGLang/SpecForge
configs count one lower, so pass their ids plus one.

How it stays fast on a GPU: only the body runs (no ``lm_head``); forward pre-hooks keep just
the three aux inputs (no ``output_hidden_states`` tuple); real tokens are gathered on the GPU
with a precomputed index (no host sync), copied to pinned host memory on a side stream while
the next batch runs, and a background thread writes those rows straight into their place in
the shard file (no further host copies).

Resumable: shard boundaries are fixed by the tokens file and ``--shard-tokens``; existing
shards are checked (header, shapes, token ids, config hash) and skipped. ``--validate`` then
reads every shard back (shapes, token ids, no NaN/Inf).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import queue
import threading
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, add_bool_arg, json_arg, make_parser, run_action
from pipeline.eagle3.common import (
    DTYPES,
    Progress,
    atomic_write_text,
    dtype_name,
    guard_config,
    load_verifier,
    log,
    pick_device,
    pick_dtype,
    verifier_config,
)
from pipeline.eagle3.datafiles import read_tokens
from pipeline.eagle3.shards import (
    INDEX,
    SHARD_FORMAT,
    StreamingShard,
    shard_name,
    validate_shard,
)
from pipeline.errors import ActionError

ACTION = "eagle3.hidden_states"


def default_aux_layers(num_layers: int) -> list[int]:
    """vLLM's default EAGLE-3 aux layer ids for an ``num_layers``-layer verifier."""
    return [2, num_layers // 2, num_layers - 3]


def check_aux_layers(aux: Any, num_layers: int, where: str) -> list[int]:
    if not (isinstance(aux, list) and len(aux) == 3 and all(isinstance(k, int) for k in aux)):
        raise ActionError(f"aux layers must be a list of three integers, got {aux!r}",
                          where=where)
    bad = [k for k in aux if not 0 <= k < num_layers]
    if bad:
        raise ActionError(f"aux layer id(s) {bad} out of range for a {num_layers}-layer "
                          f"verifier (valid: 0..{num_layers - 1}; id k = input of layer k)",
                          where=where)
    return list(aux)


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Run the verifier; save three aux layers and the last layer.")
    p.add_argument("--tokens", type=Path, required=True, help="tokenize's output directory")
    p.add_argument("--verifier", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--aux-layers", type=json_arg, default=None,
                   help="JSON list of three layer ids (default vLLM's [2, N//2, N-3])")
    p.add_argument("--batch-tokens", type=int, default=16384,
                   help="padded tokens per forward batch")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--shard-tokens", type=int, default=262144,
                   help="tokens per shard (fixes shard boundaries, so resume is exact)")
    p.add_argument("--limit", type=int, default=None, help="only the first N samples")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", choices=DTYPES, help="compute dtype")
    p.add_argument("--save-dtype", default="auto", choices=DTYPES,
                   help="stored dtype (auto: the compute dtype)")
    add_bool_arg(p, "validate", True, "read every shard back and check it after extraction")
    return p


class Capture:
    """Forward pre-hooks that keep the inputs of the aux decoder layers.

    ``__call__`` runs the body only and returns ``(aux list, last)`` with ``last`` the output of
    the final norm. Nothing is cloned: the layers make new tensors rather than writing into
    their inputs, so holding a reference is enough.
    """

    def __init__(self, model: Any, aux_layers: list[int]):
        self.body = model.model
        self.aux_layers = aux_layers
        self._store: dict[int, Any] = {}
        self._handles = [self.body.layers[k].register_forward_pre_hook(self._hook(k),
                                                                       with_kwargs=True)
                         for k in sorted(set(aux_layers))]

    def _hook(self, k: int):
        def hook(_module, args, kwargs):
            self._store[k] = args[0] if args else kwargs["hidden_states"]
        return hook

    def __call__(self, input_ids: Any) -> tuple[list[Any], Any]:
        self._store.clear()
        out = self.body(input_ids=input_ids, use_cache=False)
        aux = [self._store[k] for k in self.aux_layers]
        self._store.clear()
        return aux, out.last_hidden_state

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


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


def plan_batches(lengths: list[int], batch_tokens: int, max_batch: int) -> list[list[int]]:
    """Group sample indices (sorted by length, longest first) into padded batches."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = max([lengths[j] for j in cur] + [lengths[i]])
        if cur and (width * (len(cur) + 1) > batch_tokens or len(cur) >= max_batch):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


class ShardAssembler:
    """Background thread running the write jobs handed to it, in order; the first failure is
    re-raised in the main thread."""

    def __init__(self):
        self._q: queue.Queue = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def put(self, item: Any) -> None:
        if self.error:
            raise self.error
        self._q.put(item)

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            if self.error:
                continue
            try:
                item()
            except BaseException as exc:  # re-raised in the main thread
                self.error = exc

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()
        if self.error:
            raise self.error


def run(args: argparse.Namespace) -> StageResult:

    result = StageResult(action=ACTION)
    verifier = Path(args.verifier)
    vcfg = verifier_config(verifier)
    n_layers, hidden = int(vcfg["num_hidden_layers"]), int(vcfg["hidden_size"])
    aux_layers = (default_aux_layers(n_layers) if args.aux_layers is None else
                  check_aux_layers(args.aux_layers, n_layers, str(verifier / "config.json")))
    if args.aux_layers is None:
        check_aux_layers(aux_layers, n_layers, str(verifier / "config.json"))
    tokens = read_tokens(Path(args.tokens))
    if tokens["vocab_size"] != int(vcfg["vocab_size"]):
        raise ActionError(f"tokens are for a vocab of {tokens['vocab_size']}, the verifier "
                          f"has {vcfg['vocab_size']}", where=str(tokens["path"]))
    n = len(tokens["ids"]) if args.limit is None else min(args.limit, len(tokens["ids"]))
    device = pick_device(args.device)
    dtype = pick_dtype(args.dtype, device)
    save_dtype = dtype if args.save_dtype == "auto" else pick_dtype(args.save_dtype, device)
    out = Path(args.out)
    tok_digest = hashlib.sha256(Path(tokens["path"]).read_bytes()).hexdigest()[:16]
    cfg = {"verifier": str(verifier), "verifier_config": vcfg, "aux_layers": aux_layers,
           "tokens_sha": tok_digest, "samples": n, "shard_tokens": args.shard_tokens,
           "save_dtype": dtype_name(save_dtype)}
    digest = guard_config(out, cfg, stage=ACTION)

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
    log(f"[hidden_states] {n} samples in {len(plan)} shard(s), {len(done)} done; aux layers "
        f"{aux_layers} of {n_layers}; {dtype_name(dtype)} on {device}")

    index = {"format": SHARD_FORMAT, "config_hash": digest, "aux_layers": aux_layers,
             "hidden_size": hidden, "num_layers": n_layers,
             "vocab_size": int(vcfg["vocab_size"]), "verifier": str(verifier),
             "tokens": str(tokens["path"]), "dtype": dtype_name(save_dtype),
             "total_samples": n, "shards": []}

    def write_index(finished: list[int]) -> None:
        index["shards"] = [{"file": shard_name(i), "sample_start": plan[i][0],
                            "num_samples": plan[i][1] - plan[i][0],
                            "tokens": int(offsets[plan[i][1]] - offsets[plan[i][0]])}
                           for i in sorted(finished)]
        atomic_write_text(out / INDEX, json.dumps(index, indent=2))

    finished = list(done)
    if todo:
        model = load_verifier(verifier, device, dtype)
        stats = extract(model, tokens, plan, todo, aux_layers, out, digest, device, save_dtype,
                        args, on_shard=lambda i: (finished.append(i), write_index(finished)))
        result.metrics.update(stats)
    write_index(finished)

    if args.validate:
        for i in range(len(plan)):
            validate_shard(out / shard_name(i), tokens=tokens, hidden_size=hidden,
                           aux_layers=aux_layers, config_hash=digest, full=True)
        result.check("validated", True, value=len(plan),
                     message="shapes, token ids and finite values of every shard")
    total_tokens = int(offsets[n])
    result.metrics.update(samples=n, tokens=total_tokens, shards=len(plan),
                          resumed_shards=len(done), aux_layers=aux_layers)
    result.check("complete", len(finished) == len(plan), value=len(finished),
                 expected=len(plan))
    result.artifacts.append(str(out / INDEX))
    rate = result.metrics.get("tokens_per_s")
    result.summary = (f"hidden_states: {n} samples, {total_tokens} tokens, {len(plan)} shards"
                      + (f", {rate:.0f} tokens/s" if rate else " (all resumed)"))
    return result


def extract(model: Any, tokens: dict[str, Any], plan: list[tuple[int, int]], todo: list[int],
            aux_layers: list[int], out: Path, digest: str, device: Any, save_dtype: Any,
            args: argparse.Namespace, on_shard) -> dict[str, Any]:
    """Run the verifier over the ``todo`` shards of ``plan`` and write them.

    Per batch, on the GPU: body forward with the capture hooks, gather the real tokens with a
    precomputed index (no host sync), cast, and copy into a pinned buffer on a side stream.
    On the assembler thread: wait for that copy and write the rows into the shard file.
    """
    import torch

    hidden = model.config.hidden_size
    capture = Capture(model, aux_layers)
    on_gpu = device.type == "cuda"
    copy_stream = torch.cuda.Stream() if on_gpu else None
    offsets, input_ids, loss_mask = tokens["offsets"], tokens["input_ids"], tokens["loss_mask"]
    cap = args.batch_tokens
    # Two pinned buffer pairs: the GPU fills one while the assembler writes the other out.
    free_bufs: queue.Queue = queue.Queue()
    for _ in range(2):
        free_bufs.put((torch.empty(cap, 3 * hidden, dtype=save_dtype, pin_memory=on_gpu),
                       torch.empty(cap, hidden, dtype=save_dtype, pin_memory=on_gpu)))
    assembler = ShardAssembler()
    total = sum(int(offsets[plan[i][1]] - offsets[plan[i][0]]) for i in todo)
    progress = Progress("hidden_states", total=sum(plan[i][1] - plan[i][0] for i in todo))
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
                rows = torch.tensor([lengths[i - s] for i in order], dtype=torch.int64)
                shard_offsets = torch.zeros(len(order) + 1, dtype=torch.int64)
                shard_offsets[1:] = torch.cumsum(rows, 0)
                ids_cpu = torch.cat([input_ids[offsets[i]:offsets[i + 1]] for i in order])
                mask_cpu = torch.cat([loss_mask[offsets[i]:offsets[i + 1]] for i in order])
                meta = {"format": SHARD_FORMAT, "config_hash": digest,
                        "aux_layers": json.dumps(aux_layers), "hidden_size": hidden,
                        "sample_start": s, "num_samples": e - s}
                writer = StreamingShard(
                    out / shard_name(shard), rows=int(shard_offsets[-1]), hidden=hidden,
                    dtype=save_dtype, meta=meta,
                    small={"offsets": shard_offsets, "sample_index": torch.tensor(order),
                           "input_ids": ids_cpu.to(torch.int32), "loss_mask": mask_cpu})
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
                    flat_idx = torch.tensor(flat, dtype=torch.long).to(device, non_blocking=True)
                    aux, last = capture(ids)
                    aux_rows = torch.cat([h.reshape(-1, hidden).index_select(0, flat_idx)
                                          for h in aux], dim=1).to(save_dtype)
                    last_rows = last.reshape(-1, hidden).index_select(0, flat_idx).to(save_dtype)
                    bad_flag |= ~(torch.isfinite(aux_rows).all() & torch.isfinite(last_rows).all())
                    aux_buf, last_buf = free_bufs.get()
                    event = None
                    if on_gpu:
                        copy_stream.wait_stream(torch.cuda.current_stream())
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
                    assembler.put(_row_writer(writer, cursor, t, aux_buf, last_buf, event,
                                              free_bufs))
                    cursor += t
                    progress.update(len(batch), t)
                if bool(bad_flag):  # one host sync per shard, not per batch
                    raise ActionError(f"NaN or Inf in the verifier's hidden states for samples "
                                      f"{s}..{e - 1}", where=str(args.verifier))

                def finish(writer=writer, shard=shard, n=e - s):
                    writer.close()
                    on_shard(shard)
                    log(f"[hidden_states] wrote {writer.path.name} ({n} samples)")

                assembler.put(finish)
    finally:
        assembler.close()
        capture.remove()
    elapsed = progress.elapsed
    log(progress.line())
    return {"tokens_per_s": round(total / elapsed, 1) if elapsed else None,
            "extract_seconds": round(elapsed, 2)}


def _row_writer(writer, row, t, aux_buf, last_buf, event, free_bufs):
    def write():
        if event is not None:
            event.synchronize()
        writer.write_rows(row, aux_buf[:t], last_buf[:t])
        free_bufs.put((aux_buf, last_buf))
    return write


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
