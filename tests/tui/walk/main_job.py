"""A store like the main job's (`harness run examples/eagle3-tiny.yaml`): its nine stage
todos, read from the example itself, each with the runs, logs and series its stage records,
the verification of its drafter, and a second training run still going, whose points a
:class:`LiveSeries` thread keeps writing as the runner would."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from pipeline.series import line
from state.series import SeriesPoint
from state.store import Store

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "eagle3-tiny.yaml"
T0 = datetime(2026, 12, 6, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(minutes=40)

# A log line, or a point: (metric, x, y, axis, labels).
Point = tuple[str, Any, float, str, dict[str, Any]]
Entry = str | Point


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat(timespec="microseconds") \
        .replace("+00:00", "Z")


def _train(epochs: int, steps: int) -> list[Entry]:
    out: list[Entry] = ["draft vocab 256 of 4096; aux layers [2, 3, 4]"]
    for e in range(1, epochs + 1):
        for s in range(25, steps + 1, 25):
            step = (e - 1) * steps + s
            out += [("loss", step, round(6.0 * 0.999 ** step + 1.2, 4), "step", {}),
                    ("lr", step, 0.003, "step", {}),
                    ("tokens_per_s", step, 5200.0 + step % 300, "step", {})]
        out.append(f"epoch {e}/{epochs}  loss {6.0 * 0.999 ** (e * steps) + 1.2:.3f}")
        out += [("heldout_acc", e, round(acc * (1 - 0.5 ** e), 3), "epoch", {"position": k + 1})
                for k, acc in enumerate((0.88, 0.8, 0.7))]
        out += [("est_acceptance_length", e, round(1 + 2.1 * (1 - 0.5 ** e), 3), "epoch", {}),
                ("train_loss", e, round(6.0 * 0.999 ** (e * steps) + 1.2, 4), "epoch", {})]
    return out


STAGE_LOGS: dict[str, list[Entry]] = {
    "verifier": ["BPE tokenizer: 4096 tokens from the stdlib's source",
                 "7-layer Llama, hidden 128: 300 steps", "final loss 1.84"],
    "generate": ["1600 samples, reasoning captured in 1600 (100%)"],
    "clean": ["kept 1587 of 1600; 13 quarantined (truncated)"],
    "tokenize": ["1587 samples, 241913 tokens, 61% loss-masked"],
    "hidden_states": ["aux layers [2, 3, 4] and the last layer",
                      *((m, shard, y, "shard", {}) for shard in range(4)
                        for m, y in (("tokens_per_s", 61000.0 + shard), ("disk_mb_s", 140.0)))],
    "vocab": ["draft vocab 256: coverage 0.97 of the masked tokens"],
    "train": _train(5, 250),
    "export": ["LlamaForCausalLMEagle3, 14 tensors, round trip max abs diff 0.0"],
    "verify": [*((m, c, y, "checkpoint", {}) for c, y in
                 (("untrained", 1.02), ("previous", 2.41), ("this", 3.2))
                 for m in ("tau", "tau_teacher_forced")),
               *(("acceptance", k + 1, a, "position", {"checkpoint": "this"})
                 for k, a in enumerate((0.85, 0.82, 0.79))),
               "check PASS acceptance_length: value=3.2 expected=>= 2.0"],
}


def _log(store: Store, sid: int, run_id: int, entries: Iterable[Entry], *, offset: int = 0,
         ts: str) -> int:
    """Write ``entries`` as the job's log (points as their ``@series`` lines, stored as the
    runner stores them); returns the log's new end."""
    text, points = [], []
    for entry in entries:
        if isinstance(entry, str):
            data = entry + "\n"
        else:
            metric, x, y, axis, labels = entry
            data = line(metric, x, y, axis=axis, labels=labels) + "\n"
            points.append(SeriesPoint(run_id=run_id, start=offset, metric=metric, axis=axis,
                                      x=x, y=y, labels=labels, ts=ts))
        text.append((offset, data))
        offset += len(data.encode())
    with store.write(sid, "runner") as tx:
        for start, data in text:
            tx.append_log(run_id, start, data)
        tx.append_points(points)
    return offset


def build(store: Store, name: str = "default") -> int:
    """The main job, run once to the end, then its train stage running again."""
    spec = yaml.safe_load(EXAMPLE.read_text())
    sid = store.create_session(name, actor="human", pipeline=spec["pipeline"], ts=at(0))
    nums: dict[str, int] = {}
    with store.write(sid, "runner") as tx:
        for stage in spec["stages"]:
            t = tx.create_todo(stage["todo"], priority=stage.get("priority", "medium"),
                               stage=stage["name"], origin="pipeline", ts=at(0),
                               depends_on=[nums[n] for n in stage.get("needs", [])])
            nums[stage["name"]] = t.num
    minute = 1.0
    for stage, num in nums.items():
        with store.write(sid, "runner") as tx:
            tx.update_todo(num, status="in_progress", ts=at(minute))
            run = tx.queue_run(todo_id=num, host="local", stage=stage, ts=at(minute))
            tx.update_run(run.id, state="running", started_at=at(minute), pid=1000 + num,
                          ts=at(minute))
        _log(store, sid, run.id, STAGE_LOGS[stage], ts=at(minute + 2))
        minute += 3
        with store.write(sid, "runner") as tx:
            tx.update_run(run.id, state="succeeded", exit_code=0, ended_at=at(minute),
                          ts=at(minute))
            if stage == "verify":
                tx.record_verification(
                    todo_id=num, ts=at(minute), kind="checkpoint", passed=True,
                    verdict="gate passed: acceptance length 3.20 >= 2.0",
                    artifact="drafter", checks=[
                        {"name": "acceptance_length", "passed": True, "value": 3.2,
                         "expected": ">= 2.0", "message": "k=3, 16 prompts"},
                        {"name": "position_acceptance", "passed": True, "value": 0.85,
                         "expected": ">= 0.6", "message": ""}],
                    metrics={"acceptance_per_position": [0.85, 0.82, 0.79], "tau": 3.2},
                    gate={"min_acceptance_length": 2.0, "min_position_acceptance": 0.6})
            tx.update_todo(num, status="completed", ts=at(minute))
    with store.write(sid, "human") as tx:
        tx.update_todo(nums["train"], status="in_progress", ts=at(minute + 1))
        run = tx.queue_run(todo_id=nums["train"], host="local", stage="train", attempt=2,
                           ts=at(minute + 1))
        tx.update_run(run.id, state="running", started_at=at(minute + 1), pid=4242,
                      ts=at(minute + 1))
    _log(store, sid, run.id, _train(1, 100), ts=at(minute + 2))
    return sid


class LiveSeries(threading.Thread):
    """The running training's points and log lines, written every ``every`` seconds by a
    store of its own, as the runner writes them from another process."""

    def __init__(self, path: Path, sid: int, *, every: float = 0.2):
        super().__init__(daemon=True)
        self.path, self.sid, self.every = path, sid, every
        self.halt = threading.Event()
        self.written = 0

    def run(self) -> None:
        store = Store.open(str(self.path))
        try:
            run = next(r for r in store.runs(self.sid) if r.state == "running")
            _data, offset = store.log(run.id)
            step = 100
            while not self.halt.wait(self.every):
                step += 25
                offset = _log(store, self.sid, run.id, [
                    ("loss", step, round(6.0 * 0.999 ** step + 1.2, 4), "step", {}),
                    ("tokens_per_s", step, 5100.0, "step", {}),
                    f"epoch 2/5  step {step}"], offset=offset, ts=at(40))
                self.written += 1
        finally:
            store.close()
