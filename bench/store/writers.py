"""How does the store's one write lock behave with several writers at once?

N processes each make W status changes in one shared session (every change one write
transaction and one event, through `harness.todos`, as the CLI and the TUI do). Reports
throughput and per-write latency for 1, 2, 4 and 8 writers; the baseline is one writer
measured in the same run. At the end the session's event numbers must be gap-free. A last row runs one writer with the lock statement replaced by
a no-op (unsafe with more than one writer), which prices the lock itself.

    python -m bench.store.writers                      # SQLite file in a temp dir
    python -m bench.store.writers --pg                 # a throwaway local PostgreSQL
    python -m bench.store.writers --writes 500 --writers 1,2,4

Prints one table.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

from bench.dbarg import add_db_args, bench_db
from harness import todos
from state.db import connection as connection_mod
from state.store import Store

ITEMS_PER_WRITER = 10
CYCLE = ("in_progress", "completed", "pending")


def worker(url: str, w: int, writes: int, unlocked: bool, start: mp.Event,
           out: mp.Queue) -> None:
    if unlocked:
        connection_mod.write_lock_sql = lambda dialect: "BEGIN" if dialect == "sqlite" else "SELECT 1"
    store = Store.open(url)
    sid = store.session_by_name("shared").id
    nums = [w * ITEMS_PER_WRITER + k + 1 for k in range(ITEMS_PER_WRITER)]
    start.wait()
    times = []
    t_all = time.perf_counter()
    for i in range(writes):
        t0 = time.perf_counter()
        todos.set_status(store, sid, nums[i % len(nums)], CYCLE[(i // len(nums)) % 3])
        times.append(time.perf_counter() - t0)
    out.put((time.perf_counter() - t_all, times))
    store.close()


def measure(url: str, writers: int, writes: int, unlocked: bool = False) -> tuple[float, list]:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(url, w, writes, unlocked, start, out))
             for w in range(writers)]
    for p in procs:
        p.start()
    time.sleep(3)  # let every worker start and open its store before the clock starts
    t0 = time.perf_counter()
    start.set()
    results = [out.get() for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
        assert p.exitcode == 0, p.exitcode
    return wall, [t for _, ts in results for t in ts]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=1000, help="writes per writer")
    ap.add_argument("--writers", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    add_db_args(ap)
    args = ap.parse_args()
    counts = [int(x) for x in args.writers.split(",")]
    with bench_db(args, "writers") as url:
        store = Store.open(url)
        sid = store.create_session("shared", actor="bench")
        with store.write(sid, "bench") as tx:
            for i in range(max(counts) * ITEMS_PER_WRITER):
                tx.create_todo(f"item {i}")
        dialect = store.dialect
        configs = [(f"{n} writer{'s' if n > 1 else ''}", n, False) for n in counts]
        configs.append(("1 writer, lock statement a no-op (unsafe)", 1, True))
        # Rounds interleave the configurations, so a noisy neighbour hits them all alike;
        # each row reports its median round.
        runs: dict[str, list[tuple[float, list[float]]]] = {c[0]: [] for c in configs}
        for _ in range(args.rounds):
            for name, n, unlocked in configs:
                runs[name].append(measure(url, n, args.writes, unlocked))
        rows = [(name, *sorted(r, key=lambda x: x[0])[len(r) // 2]) for name, r in runs.items()]
        events = store.events(sid)
        assert [e.n for e in events] == list(range(1, len(events) + 1))
        store.close()

    base = args.writes / rows[0][1]
    print(f"\nStatus changes in one shared session, {args.writes} per writer ({dialect}), "
          f"median of {args.rounds} rounds")
    print("| writers | writes/s | median µs | p99 µs | × 1 writer's writes/s |")
    print("| --- | --- | --- | --- | --- |")
    for name, wall, times in rows:
        rate = len(times) / wall
        med = statistics.median(times) * 1e6
        p99 = statistics.quantiles(times, n=100)[-1] * 1e6
        print(f"| {name} | {rate:,.0f} | {med:,.0f} | {p99:,.0f} | {rate / base:.2f} |")


if __name__ == "__main__":
    main()
