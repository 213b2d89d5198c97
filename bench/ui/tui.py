"""How fast does the TUI paint a big board, and show another process's write?

Runs the real app headless (Textual's ``run_test``) on real SQLite stores:

* time to first paint: from opening the store to the board showing its rows, with 10
  todos (the baseline) and with 10,000; the target is within 2x;
* time from another process's commit to the board showing it: a writer process marks a
  todo done and reports when its commit returned; the app is watched until the row
  changes. The baseline, in the same run, is a bare ``PRAGMA data_version`` poll at the
  same interval with no UI: the least any poller of that interval can do.

    python -m bench.ui.tui                   # 10 vs 10,000 todos, 5 paints, 20 writes
    python -m bench.ui.tui --todos 50000 --paints 3 --writes 10

Prints one table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from state.store import Store
from tui.app import POLL_INTERVAL, HarnessApp
from tui.widgets.board import Board

ROOT = Path(__file__).resolve().parents[2]

SIZE = (140, 40)
STATUSES = ("pending", "completed", "in_progress", "blocked", "cancelled")

# Started with cwd=ROOT: `python -c` puts its working directory first on sys.path, so the
# writer commits with this tree's `state`, as the app reads with it.
WRITER = """
import sys, time
from state.store import Store
store = Store.open(sys.argv[1])
sid = store.session_by_name("bench").id
for line in sys.stdin:
    num, status = line.split()
    with store.write(sid, "runner") as tx:
        tx.update_todo(int(num), status=status)
    print(time.monotonic(), flush=True)
"""


def make_store(path: Path, todos: int) -> None:
    store = Store.open(str(path))
    sid = store.create_session("bench", actor="bench", pipeline="eagle3-remote")
    with store.write(sid, "bench") as tx:
        for i in range(todos):
            status = STATUSES[i % len(STATUSES)]
            tx.create_todo(f"step {i}: a todo of a long campaign, with some words in it",
                           status=status, priority=("high", "medium", "low")[i % 3],
                           stage=f"stage{i % 10}", depends_on=[i] if i % 7 == 1 else [],
                           blocked_reason="gate failed: τ 1.42 < 2.0" if status == "blocked"
                           else None)
    store.close()


async def first_paint(path: Path) -> float:
    """Seconds from opening the store to the board's first frame with rows on it."""
    start = time.perf_counter()
    store = Store.open(str(path))
    sid = store.session_by_name("bench").id
    app = HarnessApp(store, sid)
    try:
        async with app.run_test(size=SIZE) as pilot:
            board = app.screen.query_one(Board)
            while not board.loaded:
                await asyncio.sleep(0.001)
            await pilot.pause()  # the frame with the rows is drawn
            elapsed = time.perf_counter() - start
            assert board.line_text(board.rows[1]).strip(), "the board is empty"
    finally:
        store.close()
    return elapsed


async def write_to_screen(path: Path, writes: int) -> list[float]:
    """Seconds from a writer process's commit to the row showing the change."""
    store = Store.open(str(path))
    sid = store.session_by_name("bench").id
    todos = {t.num: t for t in store.todos(sid)}
    targets = [n for n, t in sorted(todos.items()) if t.status == "pending"][:writes]
    app = HarnessApp(store, sid)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out: list[float] = []
    try:
        async with app.run_test(size=SIZE) as pilot:
            await app.settled()
            board = app.screen.query_one(Board)
            for num in targets:
                assert writer.stdin and writer.stdout
                writer.stdin.write(f"{num} completed\n")
                writer.stdin.flush()
                committed = float(await asyncio.to_thread(writer.stdout.readline))
                while (t := board.todo(num)) is None or t.status != "completed":
                    await asyncio.sleep(0.001)
                await pilot.pause()  # drawn
                out.append(time.monotonic() - committed)
                await pilot.pause(0.05)
    finally:
        writer.stdin.close()  # type: ignore[union-attr]
        writer.wait(10)
        store.close()
    return out


def bare_poll(path: Path, writes: int) -> list[float]:
    """The baseline: a thread polling data_version at the app's interval, no UI."""
    store = Store.open(str(path))
    sid = store.session_by_name("bench").id
    targets = [t.num for t in store.todos(sid) if t.status == "pending"][:writes]
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    seen: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        with store.engine.connect() as conn:
            token = store.change_token(conn)
            while not stop.is_set():
                now = store.change_token(conn)
                conn.rollback()  # as the app does: end the read, or the snapshot never moves
                if now != token:
                    token = now
                    seen.append(time.monotonic())
                stop.wait(POLL_INTERVAL)

    thread = threading.Thread(target=poll)
    thread.start()
    out = []
    try:
        for num in targets:
            assert writer.stdin and writer.stdout
            count = len(seen)
            writer.stdin.write(f"{num} cancelled\n")
            writer.stdin.flush()
            committed = float(writer.stdout.readline())
            while len(seen) == count:
                time.sleep(0.001)
            out.append(seen[-1] - committed)
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
        writer.stdin.close()  # type: ignore[union-attr]
        writer.wait(10)
        store.close()
    return out


def ms(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return f"{statistics.median(values) * 1000:6.0f} / {p95 * 1000:4.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--todos", type=int, default=10_000, help="the big board")
    parser.add_argument("--paints", type=int, default=5, help="first paints per size")
    parser.add_argument("--writes", type=int, default=20, help="external writes per size")
    args = parser.parse_args()
    sizes = (10, args.todos)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths: dict[int, Path] = {}
        for n in sizes:
            paths[n] = Path(tmp) / f"tui-{n}.db"
            make_store(paths[n], n)

        def fresh(n: int, phase: str) -> Path:
            """Each phase starts from the same store (the writes change it)."""
            copy = Path(tmp) / f"tui-{n}-{phase}.db"
            shutil.copy(paths[n], copy)
            return copy

        writes = {n: min(args.writes, max(n // 5, 1)) for n in sizes}
        paint = {n: statistics.median(asyncio.run(first_paint(paths[n]))
                                      for _ in range(args.paints)) for n in sizes}
        shown = {n: asyncio.run(write_to_screen(fresh(n, "ui"), writes[n])) for n in sizes}
        bare = {n: bare_poll(fresh(n, "bare"), writes[n]) for n in sizes}
    rows.append(("first paint, median", *(f"{paint[n] * 1000:6.0f} ms" for n in sizes),
                 f"{paint[sizes[1]] / paint[sizes[0]]:.2f}x (target <= 2x)"))
    rows.append(("write -> on screen, median / p95", *(ms(shown[n]) for n in sizes),
                 f"bound {500} ms"))
    rows.append((f"baseline: bare data_version poll ({POLL_INTERVAL * 1000:.0f} ms)",
                 *(ms(bare[n]) for n in sizes), "no UI"))
    head = ("measurement", f"{sizes[0]:,} todos", f"{sizes[1]:,} todos", "")
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(4)]
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    print(json.dumps({"first_paint_s": paint, "write_to_screen_s": shown,
                      "bare_poll_s": bare}), file=sys.stderr)


if __name__ == "__main__":
    main()
