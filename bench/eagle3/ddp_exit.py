"""Does a two-rank gloo DDP run exit cleanly? The train stage's teardown against the naive one.

Each run launches ``torchrun --nproc-per-node 2`` on this file in worker mode: a small
model wrapped by ``pipeline.eagle3.hardware.distributed.wrap_ddp`` takes a few steps, then the ranks tear
down in one of three ways: ``Dist.close`` after dropping the DDP wrapper (what the train
stage does: the garbage is collected before the group is destroyed), or the baselines,
``destroy_process_group`` alone with the wrapper a local of the training function (what
the stage did) or kept referenced until interpreter shutdown (the worst case). A run fails
when torchrun exits non-zero; "terminate called" counts the ranks that died in C++
``std::terminate`` (SIGABRT) during interpreter shutdown.

    python -m bench.eagle3.ddp_exit --runs 30

The variants alternate run by run, so machine load hits them all alike. The failure is a race;
it shows most on a loaded machine (e.g. two busy loops beside it on two cores).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("drop-wrapper", "destroy-local", "destroy-kept")
_KEPT: list[object] = []


def worker(variant: str) -> None:
    import torch
    import torch.distributed

    from pipeline.eagle3.hardware.distributed import Dist, wrap_ddp

    dist = Dist("cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    ddp = wrap_ddp(model, None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        ddp(torch.randn(32, 64)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    dist.all_sum(torch.ones(3))
    dist.barrier()
    if variant == "drop-wrapper":  # what the train stage does
        del ddp
        dist.close()
        return
    # The old teardown: destroy_process_group alone, the collectable garbage of the run
    # (DDP and gloo objects in reference cycles) left for later, in shutdown at worst.
    if variant == "destroy-kept":
        _KEPT.append(ddp)
    torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(variant: str) -> tuple[bool, int, float]:
    """(exited 0, ranks that hit std::terminate, seconds)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "bench.eagle3.ddp_exit", "--worker", variant]
    # the ranks import bench.eagle3.ddp_exit and pipeline from this tree, whatever the cwd
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return (proc.returncode == 0, proc.stderr.count("terminate called"),
            time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=50, help="launches per variant")
    p.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    stats = {v: [0, 0, 0, 0.0] for v in VARIANTS}  # runs, failed, terminated, seconds
    for i in range(args.runs):
        for v in VARIANTS:
            ok, terminated, secs = launch(v)
            s = stats[v]
            s[0] += 1
            s[1] += not ok
            s[2] += terminated
            s[3] += secs
        print(f"\r{i + 1}/{args.runs} launches per variant", end="", file=sys.stderr,
              flush=True)
    print(file=sys.stderr)
    print(f"{'teardown':<34} {'runs':>5} {'failed':>7} {'rate':>7} {'terminate':>10} "
          f"{'s/run':>6}")
    for v, label in (("destroy-kept", "destroy, DDP kept to shutdown"),
                     ("destroy-local", "destroy, DDP a local (old stage)"),
                     ("drop-wrapper", "drop DDP, collect, destroy (now)")):
        runs, failed, terminated, secs = stats[v]
        print(f"{label:<34} {runs:>5} {failed:>7} {failed / runs:>7.1%} {terminated:>10} "
              f"{secs / runs:>6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
