"""What both hidden-state backends (:mod:`pipeline.eagle3.hidden_states`, hf, and
:mod:`pipeline.eagle3.states.vllm_backend`) share: samples batched by length, a shard's writer with the
small tensors beside the states, the write report that says whether the disk was the
bottleneck, and the rates each shard adds to the stage's charts.

Its own module because the hf stage starts the vllm backend and the backend writes what
the stage writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.eagle3.common import Progress, log
from pipeline.eagle3.states.shard_writer import StreamingShard, WritePipeline
from pipeline.eagle3.states.shards import SHARD_FORMAT, shard_name
from pipeline.series import emit

__all__ = ["DISK_BOUND_SHARE", "Capture", "open_shard", "plan_batches", "shard_series", "write_report"]

DISK_BOUND_SHARE = 0.1  # the forward waiting this share of the time for the writer


class Capture:
    """Forward pre-hooks that keep the inputs of the aux decoder layers.

    ``__call__`` runs the body only and returns ``(aux list, last)`` with ``last`` the output of
    the final norm, all on ``out_device`` (the layers of a verifier spread by a device map
    sit on several devices). Nothing is cloned: the layers make new tensors rather than
    writing into their inputs, so holding a reference is enough.
    """

    def __init__(self, model: Any, aux_layers: list[int], out_device: Any = None):
        self.body = model.model
        self.aux_layers = aux_layers
        self.out_device = out_device
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
        last = out.last_hidden_state
        self._store.clear()
        if self.out_device is not None:
            aux = [a.to(self.out_device) for a in aux]
            last = last.to(self.out_device)
        return aux, last

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


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


def open_shard(out: Path, shard: int, span: tuple[int, int], order: list[int],
               tokens: dict[str, Any], *, digest: str, aux_layers: list[int], hidden: int,
               save_dtype: Any, method: str, stats: Any) -> StreamingShard:
    """The writer of shard ``shard`` (samples ``span``), both backends': its rows in
    ``order`` (the batching's), with the small tensors the trainer reads beside the states
    (offsets, sample index, input ids, loss mask), all in that order."""
    import torch

    offsets, input_ids, loss_mask = tokens["offsets"], tokens["input_ids"], tokens["loss_mask"]
    s, e = span
    rows = torch.tensor([int(offsets[i + 1] - offsets[i]) for i in order], dtype=torch.int64)
    shard_offsets = torch.zeros(len(order) + 1, dtype=torch.int64)
    shard_offsets[1:] = torch.cumsum(rows, 0)
    meta = {"format": SHARD_FORMAT, "config_hash": digest,
            "aux_layers": json.dumps(aux_layers), "hidden_size": hidden,
            "sample_start": s, "num_samples": e - s}
    ids = torch.cat([input_ids[offsets[i]:offsets[i + 1]] for i in order])
    mask = torch.cat([loss_mask[offsets[i]:offsets[i + 1]] for i in order])
    return StreamingShard(
        out / shard_name(shard), rows=int(shard_offsets[-1]), hidden=hidden,
        dtype=save_dtype, meta=meta, method=method, stats=stats,
        small={"offsets": shard_offsets, "sample_index": torch.tensor(order),
               "input_ids": ids.to(torch.int32), "loss_mask": mask})


def write_report(pipeline: WritePipeline, elapsed: float, method: str) -> dict[str, Any]:
    """The write figures of a finished extraction (either backend), and the one line that
    says whether the disk was the bottleneck."""
    if not pipeline.stats.bytes:
        return {}
    ws = pipeline.stats
    share = pipeline.stall / elapsed if elapsed else 0.0
    made = ws.bytes / max(elapsed - pipeline.stall, 1e-9) / 1e9
    stats = dict(written_gb=round(ws.bytes / 1e9, 3),
                 write_gb_s=round(ws.gb_per_s, 3) if ws.gb_per_s else None,
                 write_stall_seconds=round(pipeline.stall, 2),
                 write_stall_share=round(share, 3), produced_gb_s=round(made, 3),
                 write_method=method, disk_bound=share > DISK_BOUND_SHARE)
    if share > DISK_BOUND_SHARE:
        log(f"[hidden_states] the disk is the bottleneck: shards were written at "
            f"{ws.gb_per_s:.2f} GB/s while the verifier made {made:.2f} GB/s; the forward "
            f"waited {pipeline.stall:.1f}s ({share:.0%} of the run) for the writer. A "
            f"faster disk (or /dev/shm), --write-method mmap, or train --online (no "
            f"shards at all) remove the wait")
    else:
        log(f"[hidden_states] writes kept up: {ws.bytes / 1e9:.2f} GB at "
            f"{ws.gb_per_s:.2f} GB/s, the forward waited {pipeline.stall:.1f}s "
            f"({share:.0%})")
    return stats


def shard_series(shard: int, progress: Progress, written: int) -> None:
    """The rates so far, each time a shard is written (:mod:`pipeline.series`): tokens/s
    through the verifier, and MB/s onto the disk (bytes written over the wall time)."""
    elapsed = progress.elapsed
    if elapsed > 0:
        emit("tokens_per_s", shard, progress.tokens / elapsed, axis="shard")
        emit("disk_mb_s", shard, written / elapsed / 1e6, axis="shard")
