"""How fast are replay seeks and imports?

1. Seek: on a session of 1,000,000 events (a 40-item list changed by agents and people,
   written through the real write path, snapshots every SNAPSHOT_EVERY events), the
   median time to get the list as it was at a random event (``Store.state_at``: nearest
   snapshot, then the fold) against reading the current list (``Store.todos``), in the
   same run. Target: within 2x.
2. Snapshot interval: the same seek, and what snapshots cost the writer and the disk, for
   several K on a smaller session (the seek cost depends on K, not on the session size).
3. Import: ``harness import`` of a Claude Code transcript (the real fixture's lines,
   repeated with fresh ids) against plain ``json.loads`` of the same lines. Target: at
   least half that speed. Also a worst case: a file of nothing but TodoWrite calls.

    python -m bench.store.replay                        # 1M events, ~60 MB transcript
    python -m bench.store.replay --events 200000 --sweep 16,64,256 --transcript-mb 20

Prints one table per part; the baselines are measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import state.tx as store_mod  # SNAPSHOT_EVERY lives with the write transaction
from harness.importers import import_file
from state.store import Store

ROOT = Path(__file__).resolve().parents[2]

FIXTURE = ROOT / "tests" / "data" / "claude-code-2.0.49-openroad-mcp.jsonl"
ITEMS = 40
STATUSES = ("pending", "in_progress", "completed", "blocked")


def fill(store: Store, events: int, batch: int = 20_000, seed: int = 1) -> int:
    """One session of ``events`` events: creates, status/priority/text changes, notes and
    removals on a list of about ITEMS todos, in transactions of ``batch`` events."""
    rng = random.Random(seed)
    sid = store.create_session(f"replay-{events}-{store_mod.SNAPSHOT_EVERY}", actor="bench")
    done = 1
    while done < events:
        with store.write(sid, "agent:bench") as tx:
            target = min(done + batch, events)
            while tx.state.n < target:
                todos = tx.state.todos
                r = rng.random()
                if len(todos) < ITEMS // 2 or (r < 0.02 and len(todos) < ITEMS * 1.5):
                    tx.create_todo(f"step {tx.state.next_num}: run the stage on the GPU host",
                                   priority=rng.choice(("high", "medium", "low")),
                                   origin="agent")
                    continue
                num = rng.choice(list(todos))
                if r < 0.03:
                    tx.remove_todo(num, reason="omitted by agent:bench's write")
                elif r < 0.70:
                    status = rng.choice(STATUSES)
                    tx.update_todo(num, status=status,
                                   blocked_reason="gate failed" if status == "blocked" else None)
                elif r < 0.80:
                    tx.update_todo(num, priority=rng.choice(("high", "medium", "low")))
                elif r < 0.95:
                    tx.update_todo(num, content=f"step {num}: rerun ({tx.state.n})")
                else:
                    tx.emit("todo.noted", todo_id=num, payload={"text": "checked"})
            done = tx.state.n
        print(f"  filled {done:,} events", file=sys.stderr, flush=True)
    return sid


def seek_times(store: Store, sid: int, samples: int, seed: int = 2) -> tuple[list[float],
                                                                             list[float]]:
    rng = random.Random(seed)
    last = store.last_n(sid)
    seeks, reads = [], []
    for _ in range(samples):
        n = rng.randint(1, last)
        t0 = time.perf_counter()
        state = store.state_at(sid, n)
        seeks.append(time.perf_counter() - t0)
        assert state.n == n
        t0 = time.perf_counter()
        store.todos(sid)
        reads.append(time.perf_counter() - t0)
    return seeks, reads


def us(xs: list[float]) -> float:
    return statistics.median(xs) * 1e6


def part_seek(tmp: Path, events: int, samples: int) -> None:
    store = Store.open(str(tmp / "seek.db"))
    t0 = time.perf_counter()
    sid = fill(store, events)
    print(f"  filled in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    seeks, reads = seek_times(store, sid, samples)
    store.close()
    k = store_mod.SNAPSHOT_EVERY
    print(f"\nList at a random event, session of {events:,} events, K={k}, "
          f"{samples} samples (sqlite)")
    print("| operation | median µs | p90 µs | × current list |")
    print("| --- | --- | --- | --- |")
    ref = us(reads)
    for name, xs in (("read the current list (Store.todos)", reads),
                     ("list at a random event (Store.state_at)", seeks)):
        p90 = statistics.quantiles(xs, n=10)[-1] * 1e6
        print(f"| {name} | {us(xs):,.0f} | {p90:,.0f} | {us(xs) / ref:.2f} |")


def part_sweep(tmp: Path, ks: list[int], events: int, samples: int) -> None:
    print(f"\nSnapshot interval K, session of {events:,} events, {samples} seeks each")
    print("| K | seek median µs | × current list | write µs/event | snapshot MB |")
    print("| --- | --- | --- | --- | --- |")
    saved = store_mod.SNAPSHOT_EVERY
    try:
        for k in ks:
            store_mod.SNAPSHOT_EVERY = k
            store = Store.open(str(tmp / f"k{k}.db"))
            t0 = time.perf_counter()
            sid = fill(store, events, seed=3)
            write = (time.perf_counter() - t0) / events * 1e6
            seeks, reads = seek_times(store, sid, samples)
            with store.engine.connect() as conn:
                size = conn.exec_driver_sql(
                    "SELECT COALESCE(SUM(LENGTH(state)), 0) FROM snapshots").scalar()
            store.close()
            print(f"| {k} | {us(seeks):,.0f} | {us(seeks) / us(reads):.2f} | {write:.1f} | "
                  f"{size / 1e6:.1f} |")
    finally:
        store_mod.SNAPSHOT_EVERY = saved


def make_transcript(path: Path, megabytes: int, todo_only: bool = False) -> int:
    lines = FIXTURE.read_text().splitlines()
    if todo_only:
        lines = [ln for ln in lines if '"name":"TodoWrite"' in ln]
    written = copies = 0
    with path.open("w") as fh:
        while written < megabytes << 20:
            for ln in lines:
                # Fresh ids per copy, so every call is new to the importer.
                ln = ln.replace("toolu_", f"toolu_c{copies}_")
                if todo_only:
                    ln = ln.replace("Analyze", f"Analyze ({copies})", 1)
                fh.write(ln + "\n")
                written += len(ln) + 1
            copies += 1
    return sum(1 for _ in path.open("rb"))


def time_json(path: Path) -> float:
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        for line in fh:
            json.loads(line)
    return time.perf_counter() - t0


def time_import(path: Path, tmp: Path, name: str) -> tuple[float, int]:
    db = tmp / f"import-{name}.db"
    store = Store.open(str(db))
    t0 = time.perf_counter()
    report = import_file(store, path)
    took = time.perf_counter() - t0
    store.close()
    return took, report.calls


def part_import(tmp: Path, megabytes: int, rounds: int) -> None:
    print(f"\nImport of a Claude Code transcript against json.loads of the same lines "
          f"(median of {rounds})")
    print("| file | lines | MB | json.loads MB/s | import MB/s | import ÷ json.loads "
          "| todo calls |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, mb, todo_only in (("transcript (real mix)", megabytes, False),
                                ("only TodoWrite calls (worst case)", max(megabytes // 20, 1),
                                 True)):
        path = tmp / f"{name[:10]}.jsonl"
        lines = make_transcript(path, mb, todo_only)
        size = path.stat().st_size / 1e6
        js, imp, calls = [], [], 0
        for r in range(rounds):
            js.append(time_json(path))
            took, calls = time_import(path, tmp, f"{todo_only}-{r}")
            imp.append(took)
        j, i = statistics.median(js), statistics.median(imp)
        print(f"| {name} | {lines:,} | {size:.0f} | {size / j:.0f} | {size / i:.0f} | "
              f"{j / i:.2f} | {calls:,} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--sweep", default="", help="comma-separated K values to compare")
    ap.add_argument("--sweep-events", type=int, default=200_000)
    ap.add_argument("--transcript-mb", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", default="", help="parts to skip: seek,import")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp_:
        tmp = Path(tmp_)
        if "seek" not in skip:
            part_seek(tmp, args.events, args.samples)
        if args.sweep:
            part_sweep(tmp, [int(k) for k in args.sweep.split(",")], args.sweep_events,
                       args.samples)
        if "import" not in skip:
            part_import(tmp, args.transcript_mb, args.rounds)


if __name__ == "__main__":
    main()
