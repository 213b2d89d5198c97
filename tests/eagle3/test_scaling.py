"""Training over several processes (torchrun, gloo on the CPU): the same global batch gives
the same learning, offline and online.

Two ranks with ``--batch-size B`` take one step on 2B samples, as one process with 2B does;
the batches are composed differently (each rank buckets its own share by length), so the
loss curves agree within the noise of batch composition, not bit for bit. Online, every
rank runs its own copy of the frozen verifier on its own batches. These are the CPU halves
of what bench/eagle3/two_gpu.py measures on two GPUs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.actions import params_to_argv, read_result
from pipeline.eagle3 import train

from .conftest import ok

pytestmark = [pytest.mark.ml, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STEPS = 8  # the first steps compared: 216 train samples, a global batch of 32, 2 epochs
COMMON = {"epochs": 2, "ttt_steps": 3, "lr": 0.003, "holdout": 0.1, "device": "cpu",
          "log_every": 1000, "loss_curve": STEPS}


def free_port() -> int:
    with socket.socket() as sock:  # torchrun's static rendezvous cannot take port 0
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_ranks(params: dict, result_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "pipeline.eagle3.train", *params_to_argv(params), "--result", str(result_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[:1500] + "\n[...]\n" + proc.stderr[-1500:]
    return proc, read_result(result_path)


def compare(one: list[float], two: list[float]) -> float:
    """The mean relative gap between two loss curves."""
    assert len(one) == len(two) == STEPS
    return sum(abs(a - b) / a for a, b in zip(one, two, strict=True)) / STEPS


@pytest.mark.parametrize("online", [False, True], ids=["offline", "online"])
def test_two_ranks_learn_as_one_with_the_same_global_batch(tiny_data, tmp_path, online):
    source = ({"online": True, "tokens": tiny_data["tokens"]} if online
              else {"hidden_states": tiny_data["hidden"]})
    base = {**source, "verifier": tiny_data["verifier"], "vocab": tiny_data["vocab"], **COMMON}
    single = ok(train, tmp_path / "one", out=tmp_path / "one" / "run", batch_size=32,
                batch_tokens=4096, **base)
    _proc, double = two_ranks({**base, "out": tmp_path / "two" / "run", "batch_size": 16,
                              "batch_tokens": 2048}, tmp_path / "two.json")
    assert double.ok and double.metrics["world_size"] == 2
    assert {c.name: c.passed for c in double.checks}["ranks_in_sync"]
    assert double.metrics["data"] == ("online" if online else "shards")
    one, two = single.metrics["loss_curve"], double.metrics["loss_curve"]
    # Same schedule: as many optimizer steps per epoch at the same global batch.
    assert len(single.metrics["history"]) == len(double.metrics["history"]) == 2
    gap = compare(one, two)
    print(f"loss curves ({'online' if online else 'offline'}): one rank {one}\n"
          f"two ranks {two}\nmean relative gap {gap:.4f}")
    # Both learn, and alike: the gap is batch composition, a few percent; a rank that
    # trained alone (no gradient all-reduce) or a global batch of half the size would
    # follow another curve.
    assert one[-1] < one[0] * 0.9 and two[-1] < two[0] * 0.9
    assert gap < 0.05, gap
