"""Several training processes under torchrun: the process group and DDP around the loss.

``torchrun --nproc-per-node N -m pipeline.eagle3.train ...`` sets ``WORLD_SIZE``, ``RANK``
and ``LOCAL_RANK``; :class:`Dist` reads them (or stands for one process), picks NCCL on
GPUs and gloo on the CPU, and gives the few collectives training needs. Each rank takes an
equal share of every epoch's batches (``SampleSplit.epoch_batches``), so the global batch
is ``N x --batch-size``.
"""

from __future__ import annotations

import os

from pipeline.eagle3.common import pick_device


def world_size() -> int:
    """How many processes torchrun started (1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    """This process's index on its node: the GPU it takes."""
    return int(os.environ.get("LOCAL_RANK", "0"))


class Dist:
    """torchrun's environment, or a single process."""

    def __init__(self, device_arg: str):
        import torch

        self.world = world_size()
        self.rank = rank()
        self.local_rank = local_rank()
        if self.world > 1:
            import torch.distributed as dist

            if torch.cuda.is_available() and device_arg in ("auto", "cuda"):
                torch.cuda.set_device(self.local_rank)
                self.device = torch.device("cuda", self.local_rank)
                backend = "nccl"
            else:
                self.device = torch.device("cpu")
                backend = "gloo"
            dist.init_process_group(backend)
        else:
            self.device = pick_device(device_arg)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_sum(self, t):
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(t)
        return t

    def same_everywhere(self, t) -> bool:
        """True when ``t`` holds the same values on every rank (DDP kept them in step)."""
        if self.world == 1:
            return True
        import torch.distributed as dist

        hi, lo = t.clone(), t.clone()
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        return bool((hi == lo).all())

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        """Destroy the process group, after collecting the run's cyclic garbage (drop
        the DDP wrapper first): what is left to interpreter shutdown can take the rank
        down with std::terminate (bench/eagle3/ddp_exit.py)."""
        if self.world > 1:
            import gc

            import torch.distributed as dist

            gc.collect()
            dist.destroy_process_group()


def wrap_ddp(model, device_index: int | None):
    """DDP around the loss module, without re-broadcasting buffers every step: the only
    buffer is the frozen target head, identical on every rank."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel as DDP

    # The flag was renamed in recent torch; older ones (the GPU image's) know the old name.
    no_sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in
               inspect.signature(DDP.__init__).parameters else {"broadcast_buffers": False})
    return DDP(model, device_ids=[device_index] if device_index is not None else None, **no_sync)
