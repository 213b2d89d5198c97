"""What differs between SQLite and PostgreSQL in our raw SQL: the busy timeout, the
placeholder style, the statement that takes the write lock, the change notification, and
the clock that leases are timed by.

Below both :mod:`state.db.connection` (the raw connections) and :mod:`state.db.engine` (the
SQLAlchemy engine), which apply the same rules.
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "PG_CHANGE_CHANNEL", "PG_WRITE_LOCK_KEY", "WRITE_OPTION",
           "busy_timeout_ms", "clock_sql", "notify_sql", "paramstyle_sql", "write_lock_sql"]

DEFAULT_BUSY_TIMEOUT_MS = 30_000
# Any constant will do; it only has to be the same for every harness on one database.
PG_WRITE_LOCK_KEY = 0x7D0_4A11
# Every write transaction on PostgreSQL notifies this channel (delivered at commit only),
# so watchers (the TUI) learn of any change, run logs included, without polling tables.
PG_CHANGE_CHANNEL = "harness_changes"
# Connection execution option that makes a Core transaction a writer (see state.db.engine).
WRITE_OPTION = "harness_write"


def busy_timeout_ms() -> int:
    try:
        return int(os.environ.get("HARNESS_BUSY_TIMEOUT_MS", DEFAULT_BUSY_TIMEOUT_MS))
    except ValueError:
        return DEFAULT_BUSY_TIMEOUT_MS


def paramstyle_sql(sql: str, dialect: str) -> str:
    """Our raw SQL is written with ``?``; psycopg wants ``%s``."""
    return sql.replace("?", "%s") if dialect == "postgresql" else sql


def write_lock_sql(dialect: str) -> str:
    """The statement that starts a write transaction holding the store's write lock.

    On PostgreSQL the lock is a transaction-level advisory lock on one constant key: every
    writer of the database queues on it, it is released by COMMIT or ROLLBACK (never
    leaked by a crashed client), and it is released only after the commit is visible, so
    the next writer's reads (READ COMMITTED) see everything the previous one wrote.
    """
    if dialect == "sqlite":
        return "BEGIN IMMEDIATE"
    return f"SELECT pg_advisory_xact_lock({PG_WRITE_LOCK_KEY})"


def notify_sql(dialect: str) -> str | None:
    """The statement a write transaction runs so that watchers hear of its commit."""
    if dialect == "postgresql":
        return f"SELECT pg_notify('{PG_CHANGE_CHANNEL}', %s)"
    return None


def clock_sql(dialect: str) -> str:
    """The store's clock, in seconds since the epoch, as an SQL expression.

    Leases are timed by it, never by the clients' clocks: on PostgreSQL it is the
    server's (``clock_timestamp()``, the time it is evaluated, not the transaction's
    start, which comes before the wait for the write lock), so harnesses on machines whose
    clocks disagree still agree on when a lease ran out. A SQLite store has one machine's
    clock anyway (its file is local); ``julianday('now')`` reads it to the millisecond.
    """
    if dialect == "sqlite":
        return "((julianday('now') - 2440587.5) * 86400.0)"
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
