"""Batches for drafter training, read lazily from hidden-state shards.

Deterministic for a seed: the held-out split and each epoch's order are functions of
``(seed, epoch)`` and the samples' lengths alone (:class:`SampleSplit`, shared with online
training), so a run resumed at an epoch boundary sees exactly the batches an
uninterrupted run would. A background thread assembles (and on a GPU pins) the next batches
while the current one trains.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.eagle3.states.shards import ShardReader, list_shards


@dataclass
class Batch:
    aux: torch.Tensor  # [B, S, 3Ht]
    last: torch.Tensor  # [B, S, Ht]
    input_ids: torch.Tensor  # [B, S] int64
    loss_mask: torch.Tensor  # [B, S] uint8
    tokens: int  # real (unpadded) tokens

    def to(self, device: torch.device) -> Batch:
        nb = device.type == "cuda"
        return Batch(self.aux.to(device, non_blocking=nb), self.last.to(device, non_blocking=nb),
                     self.input_ids.to(device, non_blocking=nb),
                     self.loss_mask.to(device, non_blocking=nb), self.tokens)


class SampleSplit:
    """The held-out split and every epoch's batches, from the samples' lengths alone.

    Sample ``i`` is sample ``i`` of the tokens file, whether its states come from shards
    (:class:`TrainData`) or from the verifier as training runs (:class:`pipeline.eagle3.training.online.OnlineData`):
    the same seed gives both the same batches.
    """

    def __init__(self, lengths: list[int], *, seed: int, holdout: float, max_length: int):
        self.max_length = max_length
        self.lengths = [min(n, max_length) for n in lengths]
        g = torch.Generator().manual_seed(seed)
        perm = torch.randperm(len(self.lengths), generator=g).tolist()
        n_hold = round(holdout * len(self.lengths))
        if holdout > 0 and len(self.lengths) > 1:
            n_hold = max(1, min(n_hold, len(self.lengths) - 1))
        self.heldout = sorted(perm[:n_hold])
        self.train = sorted(perm[n_hold:])
        self.seed = seed

    def epoch_batches(self, epoch: int, batch_size: int, batch_tokens: int,
                      rank: int = 0, world: int = 1) -> list[list[int]]:
        """This rank's batches for ``epoch``: shuffled, bucketed by length, equal count on
        every rank (a rank with one batch more would wait forever in DDP's all-reduce)."""
        g = torch.Generator().manual_seed(self.seed * 100003 + epoch)
        order = [self.train[i] for i in torch.randperm(len(self.train), generator=g).tolist()]
        batches = self._bucket(order, batch_size, batch_tokens)
        shuffle = torch.randperm(len(batches), generator=g).tolist()
        batches = [batches[i] for i in shuffle]
        per_rank = len(batches) // world
        return batches[rank * per_rank: (rank + 1) * per_rank] if world > 1 else batches

    def eval_batches(self, batch_size: int, batch_tokens: int) -> list[list[int]]:
        return self._bucket(list(self.heldout), batch_size, batch_tokens)

    def _bucket(self, order: list[int], batch_size: int, batch_tokens: int) -> list[list[int]]:
        batches: list[list[int]] = []
        span = max(batch_size * 16, 1)
        for start in range(0, len(order), span):
            chunk = sorted(order[start:start + span], key=lambda i: self.lengths[i])
            cur: list[int] = []
            width = 0
            for i in chunk:
                w = max(width, self.lengths[i])
                if cur and (len(cur) >= batch_size or w * (len(cur) + 1) > batch_tokens):
                    batches.append(cur)
                    cur, w = [], self.lengths[i]
                cur.append(i)
                width = w
            if cur:
                batches.append(cur)
        return batches


class TrainData(SampleSplit):
    """Batches read from hidden-state shards, samples in tokens-file order (so the batches
    do not depend on how the data was sharded)."""

    def __init__(self, hidden_dir: Path, *, seed: int, holdout: float, max_length: int):
        self.index, infos = list_shards(Path(hidden_dir))
        self.readers = [ShardReader(i.path) for i in infos]
        entries = []
        for r_i, r in enumerate(self.readers):
            for j in range(r.num_samples):
                length = int(r.offsets[j + 1] - r.offsets[j])
                entries.append((int(r.sample_index[j]), r_i, j, length))
        entries.sort()
        self.samples: list[tuple[int, int, int]] = [  # (shard, local index, length)
            (r_i, j, min(length, max_length)) for _, r_i, j, length in entries]
        super().__init__([length for *_, length in entries], seed=seed, holdout=holdout,
                         max_length=max_length)

    @property
    def aux_layers(self) -> list[int]:
        return list(self.index["aux_layers"])

    def input_counts(self, vocab_size: int) -> torch.Tensor:
        """How often each token is a drafter row's input over the shards' samples."""
        from pipeline.eagle3.model.peagle import drafter_input_counts

        return sum((drafter_input_counts(r.input_ids, r.offsets, vocab_size)
                    for r in self.readers), torch.zeros(vocab_size, dtype=torch.int64))

    def load(self, batch: list[int], pin: bool = False) -> Batch:
        rows = []
        for i in batch:
            shard, j, length = self.samples[i]
            s = self.readers[shard].sample(j)
            rows.append({k: v[:length] for k, v in s.items()})
        width = max(r["input_ids"].numel() for r in rows)
        b = len(rows)
        h3 = rows[0]["aux"].shape[-1]
        h = rows[0]["last"].shape[-1]
        aux = torch.zeros(b, width, h3, dtype=rows[0]["aux"].dtype, pin_memory=pin)
        last = torch.zeros(b, width, h, dtype=rows[0]["last"].dtype, pin_memory=pin)
        ids = torch.zeros(b, width, dtype=torch.int64, pin_memory=pin)
        mask = torch.zeros(b, width, dtype=torch.uint8, pin_memory=pin)
        tokens = 0
        for r, row in enumerate(rows):
            n = row["input_ids"].numel()
            aux[r, :n] = row["aux"]
            last[r, :n] = row["last"]
            ids[r, :n] = row["input_ids"].long()
            mask[r, :n] = row["loss_mask"]
            tokens += n
        return Batch(aux, last, ids, mask, tokens)


class Prefetcher:
    """Iterate over loaded batches, in order, ``depth`` ahead, on ``workers`` threads. One
    thread read 540k tokens/s of H=2048 shards on the H200 host, four threads less (the
    GIL): far above a training step's rate, so one is the default."""

    def __init__(self, data: TrainData, batches: list[list[int]], pin: bool, depth: int = 4,
                 workers: int = 1):
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._batches = iter(batches)
        self._pending: deque[Future] = deque()
        self._data, self._pin = data, pin
        for _ in range(depth):
            self._submit()

    def _submit(self) -> None:
        batch = next(self._batches, None)
        if batch is not None:
            self._pending.append(self._pool.submit(self._data.load, batch, self._pin))

    def __iter__(self) -> Iterator[Batch]:
        while self._pending:
            loaded = self._pending.popleft().result()
            self._submit()
            yield loaded

    def close(self) -> None:
        for fut in self._pending:
            fut.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
