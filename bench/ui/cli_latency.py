"""How long a person waits for `harness`: every everyday command, each a fresh process,
against `python -c pass` measured in the same run.

    .venv/bin/python -m bench.ui.cli_latency                # SQLite, one table
    .venv/bin/python -m bench.ui.cli_latency --pg           # also todowrite/list on PostgreSQL
    .venv/bin/python -m bench.ui.cli_latency --runs 30 --json
    .venv/bin/python -m bench.ui.cli_latency --before /tmp/base   # and an older tree's figures

The store (a fresh SQLite file) holds a session of 30 todos with some history, and an
agent's session of 30 that `todowrite` rewrites. Each case
runs the console script as a person would (`harness list`, `harness show t1`, ...); the
writing cases change something on every run (`prio` alternates high and low, `done` and
`start` take turns on one todo, `edit` and `note` write a new text each time), so each
run really writes. `--pg` starts a throwaway PostgreSQL cluster (tests/pg.py: initdb +
pg_ctl, local socket and 127.0.0.1) and adds `todowrite` of 30 and `list` against it.
The runs of all cases are interleaved, so a burst of load on a shared machine falls on
all of them alike. The table gives each case's median, p90 and ratio to the baseline's
median, the median CPU time (user + system) of the process, which a loaded machine
inflates less than the wall time, and the load average. Target (issue 25): <= 150 ms
median for each SQLite case, < 250 ms for PostgreSQL todowrite, on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.process_timing import (
    harness_exe,
    latency_rows,
    print_table,
    timed_run,
    todowrite_payloads,
)

ROOT = Path(__file__).resolve().parents[2]

Argv = Callable[[int], list[str]]


def setup(tmp: Path, db: str, root: Path = ROOT) -> dict[str, str]:
    """A store with the bench's sessions, made by the harness at ``root``."""
    env = {**os.environ, "HARNESS_DB": db, "HARNESS_DATA_DIR": str(tmp / "data"),
           "HARNESS_CONFIG_DIR": str(tmp / "config"), "HARNESS_SESSION": "bench",
           "PYTHONPATH": str(root)}
    exe = harness_exe()
    steps: list[tuple[list[str], bytes]] = [(["session", "new", "bench"], b""),
                                            (["todowrite"], todowrite_payloads()[0])]
    steps += [(["note", f"t{n}", f"a note on t{n}"], b"") for n in (1, 11, 12)]
    steps += [(["block", "t13", "--reason", "waiting for the GPU box"], b""),
              (["prio", "t14", "high"], b"")]
    # An agent's list lives in its own session: its todowrite would drop the todos people
    # edit in `bench` (the agent's list is the whole list).
    steps += [(["session", "new", "agent", "--no-use"], b""),
              (["--session", "agent", "todowrite"], todowrite_payloads()[0])]
    for args, stdin in steps:
        subprocess.run([*exe, *args], input=stdin, env=env, check=True, capture_output=True)
    return env


def sqlite_cases() -> list[tuple[str, Argv, list[bytes]]]:
    exe = harness_exe()

    def fixed(*args: str) -> Argv:
        return lambda _i: [*exe, *args]

    return [
        ("harness --help", fixed("--help"), [b""]),
        ("harness --version", fixed("--version"), [b""]),
        ("harness list", fixed("list"), [b""]),
        ("harness list --json", fixed("list", "--json"), [b""]),
        ("harness show t11", fixed("show", "t11"), [b""]),
        ("harness log -n 20", fixed("log", "-n", "20"), [b""]),
        ("harness add TEXT", lambda i: [*exe, "add", f"a new todo {i}"], [b""]),
        ("harness start t20", fixed("start", "t20"), [b""]),
        ("harness done t20", fixed("done", "t20"), [b""]),
        ("harness block t21 -r WHY", lambda i: [*exe, "block", "t21", "-r", f"why {i}"],
         [b""]),
        ("harness prio t22 high|low",
         lambda i: [*exe, "prio", "t22", "high" if i % 2 else "low"], [b""]),
        ("harness move t23 --up|--down",
         lambda i: [*exe, "move", "t23", "--up" if i % 2 else "--down"], [b""]),
        ("harness edit t24 TEXT", lambda i: [*exe, "edit", "t24", f"edited text {i}"], [b""]),
        ("harness note t25 TEXT", lambda i: [*exe, "note", "t25", f"note {i}"], [b""]),
        ("harness session list", fixed("session", "list"), [b""]),
        ("harness session use bench", fixed("session", "use", "bench"), [b""]),
        ("harness next", fixed("next"), [b""]),
        ("harness where", fixed("where"), [b""]),
        ("harness todoread", fixed("todoread"), [b""]),
        ("harness todowrite of 30", fixed("--session", "agent", "todowrite"),
         todowrite_payloads()),
    ]


def pg_cases() -> list[tuple[str, Argv, list[bytes]]]:
    exe = harness_exe()
    return [("harness todowrite of 30 [PostgreSQL]",
             lambda _i: [*exe, "--session", "agent", "todowrite"], todowrite_payloads()),
            ("harness list [PostgreSQL]", lambda _i: [*exe, "list"], [b""])]


def measure(runs: int, with_pg: bool, before: Path | None = None) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as tmp_name:
        tmp = Path(tmp_name)
        roots = [("", ROOT)] + ([(" [before]", before)] if before is not None else [])
        todo: list[tuple[str, Argv, list[bytes], dict[str, str]]] = []
        cluster = None
        try:
            if with_pg:
                from tests import pg

                cluster = pg.start()
            for suffix, root in roots:
                env = setup(tmp / f"sqlite{suffix}", str(tmp / f"state{suffix}.db"), root)
                if not todo:
                    todo.append(("python -c pass (baseline)",
                                 lambda _i: [sys.executable, "-c", "pass"], [b""], env))
                todo += [(name + suffix, argv, stdins, env)
                         for name, argv, stdins in sqlite_cases()]
                if cluster is not None:
                    pg_env = setup(tmp / f"pg{suffix}", cluster.create_database("bench"),
                                   root)
                    todo += [(name + suffix, argv, stdins, pg_env)
                             for name, argv, stdins in pg_cases()]
            times: dict[str, list[float]] = {name: [] for name, *_ in todo}
            cpu: dict[str, list[float]] = {name: [] for name, *_ in todo}
            for i in range(runs):
                for name, argv, stdins, case_env in todo:
                    stdin = stdins[i % len(stdins)]
                    r, dt, cpu_s = timed_run(argv(i), stdin, case_env)
                    # `next` exits 1 when nothing is ready; anything else is a failure
                    if r.returncode not in (0, 1) or b"error" in r.stderr:
                        raise SystemExit(f"{name} failed: {r.stderr.decode()[-500:]}")
                    times[name].append(dt)
                    cpu[name].append(cpu_s)
        finally:
            if cluster is not None:
                cluster.stop()
    return latency_rows(times, cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--pg", action="store_true",
                    help="also measure against a throwaway local PostgreSQL cluster")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="also run every case with the harness of DIR (a checkout of an "
                         "older commit, e.g. from `git archive`), interleaved, as the "
                         "[before] rows")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    rows = measure(args.runs, args.pg, args.before.resolve() if args.before else None)
    load = (load_before, os.getloadavg()[0])
    if args.json:
        print(json.dumps({"load_1m": load, "cpus": os.cpu_count(), "rows": rows}))
        return
    print(f"{args.runs} runs each, interleaved; load average {load[0]:.2f} before, "
          f"{load[1]:.2f} after, on {os.cpu_count()} CPUs")
    print_table(rows)


if __name__ == "__main__":
    main()
