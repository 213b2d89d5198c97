"""A realistic session for the TUI's tests, snapshots, screenshot and benchmark.

An EAGLE-3 drafter campaign for Kimi K2.5, mid-way: data done, the first drafter's
checkpoint failed its gate twice (no d2t, then too little data), training runs again.
Every timestamp is fixed, so the screens it produces are the same on every run.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

from state.series import SeriesPoint
from state.store import Store

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=6, minutes=12)  # the clock the app is given in tests


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat(timespec="microseconds") \
        .replace("+00:00", "Z")


STAGES = [
    # (todo, stage, priority)
    ("Generate 10K synthetic samples from Kimi K2.5 (reasoning kept in <think>)", "generate",
     "high"),
    ("Clean and dedupe the samples; drop truncated answers", "clean", "medium"),
    ("Tokenize with the Kimi chat template; loss mask over assistant tokens", "tokenize",
     "medium"),
    ("Capture hidden states of layers 2, 30, 58 and the last layer", "hidden_states", "high"),
    ("Build the vocab mapping (draft vocab 32K): d2t offsets and t2d mask", "vocab", "medium"),
    ("Train the EAGLE-3 drafter (3 TTT steps, 5 epochs)", "train", "high"),
    ("Export the checkpoint in speculators format", "export", "medium"),
    ("Verify the checkpoint: acceptance per position and projected speedup", "verify", "high"),
    ("Serve with vLLM speculative decoding (k=3)", "serve", "medium"),
    ("Benchmark throughput against the no-draft baseline", "benchmark", "low"),
]

TRAIN_LOG = [
    "loading verifier config from /data/hf/kimi-k2.5 (61 layers, hidden 7168)",
    "draft vocab 32000 of 163840; d2t int64[32000], t2d bool[163840] (32000 true)",
    "aux hidden states from layers [2, 30, 58] (vLLM ids), target = last layer",
    "\x1b[32mepoch 1/5\x1b[0m  step 200/1250  loss 3.412  acc@1 0.412  lr 2.0e-04",
    "epoch 1/5  step 400/1250  loss 2.871  acc@1 0.468  lr 2.0e-04",
    "epoch 1/5  step 600/1250  loss 2.655  acc@1 0.497  lr 1.9e-04",
    "epoch 1/5  step 800/1250  loss 2.514  acc@1 0.519  lr 1.9e-04",
    "epoch 1/5  step 1000/1250  loss 2.430  acc@1 0.531  lr 1.8e-04",
    "epoch 1/5  step 1250/1250  loss 2.377  acc@1 0.540  lr 1.8e-04  (saved step_1250)",
    "epoch 2/5  step 200/1250  loss 2.301  acc@1 0.552  lr 1.8e-04",
]


def build(store: Store, name: str = "kimi-k25-eagle3") -> int:
    """Write the campaign into ``store``; returns the session id."""
    sid = store.create_session(name, actor="human", pipeline="eagle3-remote", ts=at(0))
    with store.write(sid, "runner") as tx:
        nums = []
        for i, (text, stage, prio) in enumerate(STAGES):
            deps = [nums[-1]] if nums else []
            t = tx.create_todo(text, priority=prio, stage=stage, depends_on=deps,
                               origin="pipeline", ts=at(1 + i * 0.01))
            nums.append(t.num)
    with store.write(sid, "human") as tx:
        tx.create_todo("Ask infra for a second H200 node for the benchmark", priority="low",
                       ts=at(2))
        tx.create_todo("Try SpecForge instead of our trainer", priority="low", ts=at(3))
    # Stages 1-5 ran and passed.
    minute = 5.0
    for num in nums[:5]:
        _run(store, sid, num, STAGES[num - 1][1], minute, minute + 20, "succeeded", 0)
        minute += 25
    with store.write(sid, "human") as tx:
        tx.update_todo(12, status="cancelled", ts=at(60))
        tx.emit("todo.noted", todo_id=12, payload={"text": "our trainer is fine; keep one "
                                                   "code path"}, ts=at(60.5))
    # First training run, then two verifications that fail the gate.
    first = _run(store, sid, 6, "train", minute, minute + 90, "succeeded", 0)
    with store.write(sid, "runner") as tx:
        tx.append_points(_points(first, minute + 90, [
            *(("loss", "step", s, round(1.95 + 1.6 * 0.9994 ** s, 3), {})
              for s in range(250, 6251, 250)),
            *(("heldout_acc", "epoch", e, acc, {"position": k + 1})
              for e, accs in enumerate([(0.44, 0.19, 0.08), (0.49, 0.22, 0.1),
                                        (0.51, 0.23, 0.1), (0.52, 0.24, 0.11),
                                        (0.52, 0.24, 0.11)], start=1)
              for k, acc in enumerate(accs))]))
    minute += 95
    _run(store, sid, 7, "export", minute, minute + 5, "succeeded", 0)
    minute += 6
    _verify(store, sid, 8, minute, passed=False,
            verdict="gate failed: acceptance length 1.31 < 2.0; projected speedup 0.66x < 1.1",
            per_position=[0.19, 0.08, 0.04], tau=1.31, speedup=0.66, d2t=False)
    minute += 10
    _verify(store, sid, 8, minute, passed=False,
            verdict="gate failed: acceptance length 1.87 < 2.0; projected speedup 1.04x < 1.1",
            per_position=[0.52, 0.24, 0.11], tau=1.87, speedup=1.04, d2t=True)
    with store.write(sid, "runner") as tx:
        tx.update_todo(8, status="blocked", ts=at(minute + 1),
                       blocked_reason="gate failed: acceptance length 1.87 < 2.0; projected "
                                      "speedup 1.04x < 1.1 (5K samples is too little data)")
    with store.write(sid, "agent:claude") as tx:
        tx.emit("todo.noted", todo_id=6, ts=at(minute + 3),
                payload={"text": "retrain on the full 10K with 5 epochs; the 5K run matches "
                                 "the speculators regression floor"})
        tx.update_todo(6, status="in_progress", ts=at(minute + 4))
        tx.update_todo(11, priority="medium", ts=at(minute + 5))
    # The second training run, still going (NOW is 6h12m after T0).
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=6, host="gpu", stage="train", attempt=2, ts=at(330),
                           command="python -m pipeline.eagle3.train --epochs 5")
        _bookkeeping(tx, run.id, 330)
        tx.update_run(run.id, state="running", started_at=at(331), pid=4242,
                      run_dir="/data/eagle3/runs/r8", ts=at(331))
        offset = 0
        for text in TRAIN_LOG:
            data = text + "\n"
            tx.append_log(run.id, offset, data)
            offset += len(data.encode())
        tx.append_points(_points(run.id, 360, [
            *(("loss", "step", step, loss, {}) for step, loss in TRAIN_LOSS),
            *(("lr", "step", step, 2.0e-4 - step * 1.6e-8, {}) for step, _ in TRAIN_LOSS),
            *(("heldout_acc", "epoch", 1, acc, {"position": k + 1})
              for k, acc in enumerate((0.58, 0.31, 0.16)))]))
        tx.append_log(run.id, offset, "epoch 2/5  step 350/1250  loss 2.27\r"
                                      "epoch 2/5  step 400/1250  loss 2.25")
    return sid


# The running training's loss, as its log above says it (steps counted over epochs).
TRAIN_LOSS = [(200, 3.412), (400, 2.871), (600, 2.655), (800, 2.514), (1000, 2.430),
              (1250, 2.377), (1450, 2.301), (1650, 2.25)]


def _points(run_id: int, minute: float,
            rows: Iterable[tuple[str, str, float, float, dict[str, int]]]) -> list[SeriesPoint]:
    """Points as the runner stores them from ``@series`` lines (``start``: their line's
    offset in the log, here simply their order)."""
    return [SeriesPoint(run_id=run_id, start=i, metric=m, axis=axis, x=x, y=y, labels=labels,
                        ts=at(minute)) for i, (m, axis, x, y, labels) in enumerate(rows)]


def _run(store: Store, sid: int, num: int, stage: str, start: float, end: float, state: str,
         code: int) -> int:
    with store.write(sid, "runner") as tx:
        tx.update_todo(num, status="in_progress", ts=at(start))
        run = tx.queue_run(todo_id=num, host="gpu", stage=stage, ts=at(start))
        _bookkeeping(tx, run.id, start)
        tx.update_run(run.id, state="running", started_at=at(start), ts=at(start))
    with store.write(sid, "runner") as tx:
        tx.update_run(run.id, state=state, exit_code=code, ended_at=at(end), ts=at(end))
        if state == "succeeded":
            tx.update_todo(num, status="completed", ts=at(end))
    return run.id


def _verify(store: Store, sid: int, num: int, minute: float, *, passed: bool, verdict: str,
            per_position: list[float], tau: float, speedup: float, d2t: bool) -> None:
    _run(store, sid, num, "verify", minute, minute + 4, "failed", 1)
    with store.write(sid, "runner") as tx:
        tx.record_verification(
            todo_id=num, ts=at(minute + 4), kind="checkpoint", passed=passed, verdict=verdict,
            artifact="/data/eagle3/export/kimi-k25-eagle3", sha256="9f2c4e1ab03d" * 5 + "abcd",
            checks=[
                {"name": "keys_and_shapes", "passed": True, "value": "112/112",
                 "expected": "112/112", "message": ""},
                {"name": "d2t_present", "passed": d2t, "value": "int64[32000]" if d2t
                 else "missing", "expected": "int64[32000]",
                 "message": "" if d2t else "vLLM silently uses the identity mapping"},
                {"name": "acceptance_length", "passed": tau >= 2.0, "value": tau,
                 "expected": ">= 2.0", "message": "k=3, temperature 0, 200 prompts"},
                {"name": "projected_speedup", "passed": speedup >= 1.1, "value": speedup,
                 "expected": ">= 1.1", "message": ""},
            ],
            metrics={"acceptance_per_position": per_position, "tau": tau,
                     "projected_speedup": speedup, "acceptance_rate": round(
                         sum(per_position) / len(per_position), 3)},
            gate={"min_acceptance_length": 2.0, "min_projected_speedup": 1.1})


def _bookkeeping(tx, run_id: int, minute: float) -> None:  # type: ignore[no-untyped-def]
    """What the runner records about a job before it starts, as harness/runner does."""
    host = {"name": "gpu", "host": "gpu-container", "port": 22, "user": "root",
            "workdir": "/data/eagle3", "python": "/opt/venv/bin/python"}
    tx.update_run(run_id, job={"key": f"5f3a9c1e-r{run_id}", "host": host},
                  owner="laptop:31337", ts=at(minute))
