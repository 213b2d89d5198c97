"""What does the TUI's change detection cost, and how soon does it see another's commit?

Two ways to ask "did anything change?": `Store.change_token` (PRAGMA data_version on
SQLite; the highest event seq on PostgreSQL, an index seek) and `Store.watch()` (the same
pragma on SQLite; LISTEN/NOTIFY on PostgreSQL, where asking reads the socket and sends
nothing). For each: the cost of one poll when nothing changed, and the time from another
process's commit (once the writer says it has committed) to the poller seeing it, polling
flat out: a poll that sees it at once costs one poll. The baseline is a `SELECT 1` round
trip on a kept connection, in the same run.

    python -m bench.store.watch                 # SQLite
    python -m bench.store.watch --pg            # a throwaway local PostgreSQL
    python -m bench.store.watch --events 1000000 --pg

Prints one table.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable

from bench.dbarg import add_db_args, bench_db
from bench.store.todowrite import fill
from harness import todos
from state.store import Store

POLLS = 3000
COMMITS = 200


def writer(url: str, commits: int, start: mp.Event, out: mp.Queue, ack: mp.Semaphore) -> None:
    """One write at a time: the next waits until the poller has seen this one."""
    store = Store.open(url)
    sid = store.session_by_name("bench").id
    start.wait()
    for i in range(commits):
        time.sleep(0.002)
        todos.edit(store, sid, 1, f"edit {i}")
        out.put(None)  # committed: the poller starts its clock when it hears this
        ack.acquire()
    store.close()


def poll_cost(poll: Callable[[], object]) -> float:
    times = []
    for _ in range(POLLS):
        t0 = time.perf_counter()
        poll()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def latency(url: str, changed: Callable[[], bool]) -> float:
    ctx = mp.get_context("spawn")
    start, out, ack = ctx.Event(), ctx.Queue(), ctx.Semaphore(0)
    p = ctx.Process(target=writer, args=(url, COMMITS, start, out, ack))
    p.start()
    time.sleep(3)
    changed()
    start.set()
    lags = []
    for _ in range(COMMITS):
        out.get()
        began = time.perf_counter()
        deadline = began + 10
        while not changed():
            if time.perf_counter() > deadline:
                p.kill()
                raise SystemExit("a commit was never seen: change detection is broken")
        lags.append((time.perf_counter() - began) * 1e6)
        ack.release()
    p.join()
    return statistics.median(lags)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000, help="history to fill first")
    add_db_args(ap)
    args = ap.parse_args()
    with bench_db(args, "watch") as url:
        store = Store.open(url)
        fill(store, args.events)
        sid = store.create_session("bench", actor="bench")
        todos.add(store, sid, "edited by the writer")
        rows = []
        with store.engine.connect() as conn:
            def select_one() -> object:
                value = conn.exec_driver_sql("SELECT 1").scalar()
                conn.rollback()
                return value

            def token() -> object:
                value = store.change_token(conn)
                conn.rollback()  # as a poller must: an open transaction pins a snapshot
                return value

            rows.append(("SELECT 1 round trip (baseline)", poll_cost(select_one), None))
            last = [token()]

            def token_moved() -> bool:
                now = token()
                moved, last[0] = now != last[0], now
                return moved

            rows.append(("Store.change_token " + ("(PRAGMA data_version)"
                         if store.dialect == "sqlite" else "(max event seq)"),
                         poll_cost(token), latency(url, token_moved)))
        with store.watch() as watch:
            watch.changed()
            how = "PRAGMA data_version" if store.dialect == "sqlite" else "LISTEN/NOTIFY"
            rows.append((f"Store.watch().changed() ({how})", poll_cost(watch.changed),
                         latency(url, watch.changed)))
        dialect = store.dialect
        store.close()

    base = rows[0][1]
    print(f"\nChange detection on a store of {args.events:,} events ({dialect})")
    print("| method | µs per poll, nothing changed | × SELECT 1 | commit to seen, median µs |")
    print("| --- | --- | --- | --- |")
    for name, cost, lag in rows:
        print(f"| {name} | {cost:,.1f} | {cost / base:.2f} | "
              f"{'' if lag is None else f'{lag:,.0f}'} |")


if __name__ == "__main__":
    main()
