"""What does a store outage cost a command? Writers on PostgreSQL while its network is cut
and its server restarted.

A throwaway PostgreSQL cluster (tests/pg.py) is reached through a loopback TCP proxy that
can cut connections (tests/tcp_proxy.py). N writers each run ``harness add`` (a fresh
process, as a person or an agent runs it) in a loop; meanwhile the proxy drops every
connection and refuses new ones for ``--cut`` seconds, twice, and the server itself is
restarted once (``pg_ctl restart -m fast``) between the two cuts. Then the store is read
back directly: every todo whose command said it was added must be there once.

Reports, per round: commands run and failed, acknowledged writes lost, duplicates, hung
commands (killed after ``--kill-after`` s), and the latency of the commands that met an
outage (their run overlapped one) against those that did not, p50 / p99 / max.

    python -m bench.store.cuts                      # 4 writers, two 4 s cuts, a restart
    python -m bench.store.cuts --before 2d41927     # the same against the code at a revision
    python -m bench.store.cuts --rounds 3 --writers 4 --cut 4

Prints one table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.before_tree import ROOT, export_tree
from tests import pg
from tests.tcp_proxy import CutProxy


@dataclass
class Command:
    writer: int
    text: str
    start: float
    end: float = 0.0
    code: int | None = None
    err: str = ""


@dataclass
class Round:
    commands: list[Command] = field(default_factory=list)
    outages: list[tuple[float, float]] = field(default_factory=list)
    stored: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def writer(w: int, url: str, env: dict[str, str], cwd: Path, stop: threading.Event,
           out: list[Command], kill_after: float) -> None:
    k = 0
    while not stop.is_set():
        k += 1
        cmd = Command(w, f"w{w}-{k}", time.monotonic())
        try:
            r = subprocess.run([sys.executable, "-m", "harness", "--db", url, "add", cmd.text],
                               cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=kill_after)
            cmd.code, cmd.err = r.returncode, r.stderr.strip()
        except subprocess.TimeoutExpired:
            cmd.code, cmd.err = -9, f"hung: killed after {kill_after:g} s"
        cmd.end = time.monotonic()
        out.append(cmd)


def one_round(cluster: pg.PgCluster, args: argparse.Namespace, tree: Path,
              env: dict[str, str]) -> Round:
    url_direct = cluster.create_database("cuts")
    proxy = CutProxy(cluster.port)
    url = url_direct.replace(f":{cluster.port}/", f":{proxy.port}/")
    # The schema first, with nothing in the way.
    subprocess.run([sys.executable, "-m", "harness", "--db", url, "list"], cwd=tree, env=env,
                   check=True, capture_output=True)
    rnd = Round()
    stop = threading.Event()
    threads = [threading.Thread(target=writer, args=(w, url, env, tree, stop, rnd.commands,
                                                     args.kill_after))
               for w in range(args.writers)]
    for t in threads:
        t.start()
    try:
        time.sleep(args.calm)
        t0 = time.monotonic()
        proxy.cut(args.cut, wait=True)
        rnd.outages.append((t0, time.monotonic()))
        time.sleep(args.calm)
        t0 = time.monotonic()
        cluster.restart()
        rnd.outages.append((t0, time.monotonic()))
        time.sleep(args.calm)
        t0 = time.monotonic()
        proxy.cut(args.cut, wait=True)
        rnd.outages.append((t0, time.monotonic()))
        time.sleep(args.calm)
    finally:
        stop.set()
        for t in threads:
            t.join()
        proxy.close()
    import psycopg

    with psycopg.connect(url_direct.replace("postgresql+psycopg://", "postgresql://")) as c:
        rnd.stored = [r[0] for r in c.execute("SELECT content FROM todos")]
    return rnd


def met_outage(cmd: Command, outages: list[tuple[float, float]]) -> bool:
    return any(cmd.start < end and cmd.end > start for start, end in outages)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--cut", type=float, default=4.0, help="seconds each cut lasts")
    ap.add_argument("--calm", type=float, default=3.0,
                    help="seconds of calm before, between and after the outages")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kill-after", type=float, default=150.0,
                    help="a command still running after this is killed and counted as hung")
    ap.add_argument("--before", metavar="REF", help="run the code at this git revision")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        tree = ROOT
        if args.before:
            tree = export_tree(args.before, Path(tmp) / "tree")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH"))
                                            if p)
        env["HARNESS_DATA_DIR"] = env["HARNESS_CONFIG_DIR"] = str(Path(tmp) / "home")
        cluster = pg.start({"fsync": "off", "synchronous_commit": "off"})
        try:
            rounds = [one_round(cluster, args, tree, env) for _ in range(args.rounds)]
        finally:
            cluster.stop()
    label = args.before or "this tree"
    print(f"\n{args.writers} writers of `harness add` through a proxy: two {args.cut:g} s "
          f"cuts and a server restart per round ({label})")
    print("| round | commands | failed | hung | acked lost | duplicates | met an outage | "
          "their p50 / p99 / max s | others' p50 / p99 s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    errors: dict[str, int] = {}
    for i, rnd in enumerate(rounds, 1):
        acked = [c.text for c in rnd.commands if c.code == 0]
        counts: dict[str, int] = {}
        for text in rnd.stored:
            counts[text] = counts.get(text, 0) + 1
        lost = sum(1 for t in acked if t not in counts)
        dups = sum(n - 1 for n in counts.values() if n > 1)
        failed = [c for c in rnd.commands if c.code != 0]
        hung = sum(1 for c in failed if c.code == -9)
        for c in failed:
            line = c.err.splitlines()[-1] if c.err else f"exit {c.code}"
            errors[line[:160]] = errors.get(line[:160], 0) + 1
        met = [c.end - c.start for c in rnd.commands if met_outage(c, rnd.outages)]
        calm = [c.end - c.start for c in rnd.commands if not met_outage(c, rnd.outages)]
        print(f"| {i} | {len(rnd.commands)} | {len(failed)} | {hung} | {lost} | {dups} | "
              f"{len(met)} | {percentile(met, 50):.2f} / {percentile(met, 99):.2f} / "
              f"{max(met, default=float('nan')):.2f} | {percentile(calm, 50):.2f} / "
              f"{percentile(calm, 99):.2f} |")
    for line, n in sorted(errors.items(), key=lambda kv: -kv[1]):
        print(f"  {n} x {line}")


if __name__ == "__main__":
    main()
