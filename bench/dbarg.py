"""The store a benchmark runs against: ``--db`` and ``--pg``, shared by every bench.

    --db PATH|URL       a SQLite path or a database URL (default: a SQLite file in a temp dir)
    --pg                start a throwaway PostgreSQL cluster on this machine (tests/pg.py),
                        make a fresh database in it, and use that; stopped at exit
    --pg-set KEY=VALUE  a server setting for --pg (repeatable), e.g. synchronous_commit=off

Use it in a bench::

    from bench.dbarg import add_db_args, bench_db
    add_db_args(ap)
    args = ap.parse_args()
    with bench_db(args, "todowrite") as url:
        store = Store.open(url)
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def add_db_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("store")
    g.add_argument("--db", metavar="PATH|URL",
                   help="SQLite path or database URL (default: a SQLite file in a temp dir)")
    g.add_argument("--pg", action="store_true",
                   help="start a throwaway PostgreSQL cluster here and use a fresh database")
    g.add_argument("--pg-set", action="append", default=[], metavar="KEY=VALUE",
                   help="server setting for --pg (repeatable)")


@contextmanager
def bench_db(args: argparse.Namespace, name: str) -> Iterator[str]:
    """The URL (or SQLite path) to benchmark; a --pg cluster lives as long as the block."""
    if args.pg:
        from tests import pg  # the test fixture's cluster: initdb + pg_ctl, no root

        settings = dict(kv.split("=", 1) for kv in args.pg_set)
        # A server outlives a killed client: turn SIGTERM (timeout, kill) into an
        # exception, so that the `finally` below stops it.
        signal.signal(signal.SIGTERM, _raise_interrupt)
        cluster = pg.start(settings)
        try:
            shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
            version = cluster.sql("SHOW server_version")[0][0]
            print(f"  PostgreSQL {version} on 127.0.0.1:{cluster.port} ({shown})",
                  file=sys.stderr)
            yield cluster.create_database(name)
        finally:
            cluster.stop()
        return
    if args.db:
        yield args.db
        return
    yield str(Path(tempfile.mkdtemp(prefix=f"bench-{name}-")) / "state.db")
