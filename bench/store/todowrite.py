"""How much does keeping full history cost on an agent's list write?

Applies a 30-item agent write with one change (the opencode shape), through the harness's
real path (parse, three-way merge, one event, the projection row, the agent view, commit),
on a store already holding 1,000,000 events. Compares it in the same run with opencode's
own approach: delete the session's rows and re-insert all 30 with raw sqlite3, no history.

    python -m bench.store.todowrite                 # 1M events, 2000 writes each
    python -m bench.store.todowrite --events 100000 --writes 500
    python -m bench.store.todowrite --pg            # the same on a throwaway local PostgreSQL
    python -m bench.store.todowrite --db postgresql://user@host/db   # on a server you have

Prints one table: median and p90 per write, and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.dbarg import add_db_args, bench_db
from harness import formats
from harness.agents.todolist import todowrite
from state.store import Store

ITEMS = 30


def payload(flip: int) -> dict:
    todos = []
    for i in range(ITEMS):
        status = "completed" if i < 10 else "pending"
        if i == 10 + flip % 20:
            status = "in_progress"
        todos.append({"content": f"Step {i}: do the thing number {i} on the GPU host",
                      "status": status, "priority": ["high", "medium", "low"][i % 3]})
    return {"todos": todos}


def fill(store: Store, events: int, batch: int = 50_000) -> None:
    """Other sessions' history, written through the real write path in big transactions."""
    sid = store.create_session("filler", actor="bench")
    done = 1
    with store.write(sid, "bench") as tx:
        for i in range(100):
            tx.create_todo(f"filler {i}")
        done += 100
    while done < events:
        with store.write(sid, "bench") as tx:
            for i in range(min(batch, events - done)):
                tx.update_todo(1 + i % 100, content=f"filler {i} {done}")
            done += min(batch, events - done)
        print(f"  filled {done:,} events", file=sys.stderr, flush=True)


def bench_harness(store: Store, sid: int, start: int, writes: int) -> list[float]:
    actor = "agent:bench"
    if start == 0:
        todowrite(store, sid, formats.parse(payload(0)), actor=actor)
    times = []
    for k in range(start + 1, start + writes + 1):
        body = payload(k)
        t0 = time.perf_counter()
        result = todowrite(store, sid, formats.parse(body), actor=actor)
        times.append(time.perf_counter() - t0)
        assert result.events == 2, result.events  # one item leaves in_progress, one enters
    return times


def bench_opencode(path: Path, writes: int) -> list[float]:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("CREATE TABLE IF NOT EXISTS opencode_todo (session_id TEXT, position INTEGER, "
                "content TEXT, status TEXT, priority TEXT, PRIMARY KEY (session_id, position))")
    times = []
    for k in range(writes):
        body = payload(k)
        t0 = time.perf_counter()
        rows = [("ses_1", i, t["content"], t["status"], t["priority"])
                for i, t in enumerate(body["todos"])]
        con.execute("BEGIN IMMEDIATE")
        con.execute("DELETE FROM opencode_todo WHERE session_id = ?", ("ses_1",))
        con.executemany("INSERT INTO opencode_todo VALUES (?, ?, ?, ?, ?)", rows)
        con.execute("COMMIT")
        times.append(time.perf_counter() - t0)
    con.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--writes", type=int, default=2000)
    add_db_args(ap)  # the opencode baseline always runs on a SQLite file
    args = ap.parse_args()
    with bench_db(args, "todowrite") as url:
        run(args, url)


def run(args: argparse.Namespace, url: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-todowrite-"))
    store = Store.open(url)
    t0 = time.perf_counter()
    fill(store, args.events)
    print(f"  filled in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    baseline_path = Path(store.where) if store.dialect == "sqlite" else tmp / "opencode.db"
    # Interleave the two in blocks so drift on a noisy machine hits both alike.
    ours: list[float] = []
    base: list[float] = []
    block = max(args.writes // 10, 1)
    sid = store.create_session("bench", actor="bench")
    for b in range(10):
        base += bench_opencode(baseline_path, block)
        ours += bench_harness(store, sid, b * block, block)
    store.close()

    def row(name: str, xs: list[float], ref: float) -> str:
        med = statistics.median(xs) * 1e6
        p90 = statistics.quantiles(xs, n=10)[-1] * 1e6
        return f"| {name} | {med:,.0f} | {p90:,.0f} | {med / ref:.2f} |"

    ref = statistics.median(base) * 1e6
    print(f"\n30-item agent write, one change, store holding {args.events:,} events "
          f"({store.dialect}), {len(ours)} writes each")
    print("| approach | median µs | p90 µs | × opencode |")
    print("| --- | --- | --- | --- |")
    print(row("opencode: delete + re-insert 30 rows (raw sqlite3, no history)", base, ref))
    print(row(f"todo-harness todowrite: merge + event + projection ({store.dialect})", ours, ref))
    print(json.dumps({"events": args.events, "writes": len(ours),
                      "opencode_median_us": ref,
                      "harness_median_us": statistics.median(ours) * 1e6}))


if __name__ == "__main__":
    main()
