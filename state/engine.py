"""Engine set-up for SQLite (the embedded default) and PostgreSQL (teams).

SQLite: WAL, ``foreign_keys=ON`` and ``busy_timeout`` on every pooled connection (a
connect-event listener), ``synchronous=NORMAL``, and the driver's own transaction handling
switched off so that write transactions can take the lock up front with
``BEGIN IMMEDIATE``: ``busy_timeout`` does not save a deferred read transaction that later
tries to write.

PostgreSQL: writers serialise on a transaction-level advisory lock, which is what keeps
the event sequence gap-free and totally ordered (see :func:`write_lock_sql`). Connections
run at READ COMMITTED whatever the server's default, because a writer must see every
commit made before it got the lock (a REPEATABLE READ snapshot would be taken before the
lock and miss them). ``lock_timeout`` follows ``HARNESS_BUSY_TIMEOUT_MS``, so a writer
waits for the lock as long as it would for a busy SQLite file, then fails with "locked".
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from state.errors import StoreUnavailable

DEFAULT_BUSY_TIMEOUT_MS = 30_000
# Any constant will do; it only has to be the same for every harness on one database.
PG_WRITE_LOCK_KEY = 0x7D0_4A11
# Every write transaction on PostgreSQL notifies this channel (delivered at commit only),
# so watchers (the TUI) learn of any change, run logs included, without polling tables.
PG_CHANGE_CHANNEL = "harness_changes"
# Connection execution option that makes a Core transaction a writer (see write_begin).
WRITE_OPTION = "harness_write"


def busy_timeout_ms() -> int:
    try:
        return int(os.environ.get("HARNESS_BUSY_TIMEOUT_MS", DEFAULT_BUSY_TIMEOUT_MS))
    except ValueError:
        return DEFAULT_BUSY_TIMEOUT_MS


def normalize_url(target: str) -> str:
    """A path or an SQLAlchemy URL -> an SQLAlchemy URL."""
    if "://" in target:
        try:
            url = make_url(target)
        except ArgumentError as exc:
            raise StoreUnavailable(f"not a database URL ({exc})", where=target) from None
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+psycopg")
        return url.render_as_string(hide_password=False)
    if target == ":memory:":
        return "sqlite://"
    return "sqlite:///" + str(Path(target).expanduser().resolve())


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def sqlite_path(url: str) -> Path | None:
    if not is_sqlite(url):
        return None
    db = make_url(url).database
    return Path(db) if db else None


def public_url(url: str) -> str:
    """The URL with any password masked: safe to print, log, or key a config file by."""
    if is_sqlite(url):
        return url
    return make_url(url).render_as_string(hide_password=True)


def display_url(url: str) -> str:
    """For messages: the file path for SQLite, the URL without password otherwise."""
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    if is_sqlite(url):
        return ":memory:"
    return make_url(url).render_as_string(hide_password=True)


def _on_sqlite_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    # The driver must not open transactions behind our back, or BEGIN IMMEDIATE fails.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {busy_timeout_ms()}")
    cur.execute("PRAGMA foreign_keys = ON")
    _ensure_wal(cur)
    cur.execute("PRAGMA synchronous = NORMAL")
    cur.close()


def _ensure_wal(cur: sqlite3.Cursor) -> None:
    """Put a (new) database file in WAL mode, waiting out other connections doing the same.

    SQLite fails a journal-mode change at once, without its busy handler, while another
    connection holds a write lock on a file still in rollback mode: exactly what two
    harnesses opening a fresh store together do to each other. So retry until the busy
    timeout, as any other locked statement would wait.
    """
    deadline = time.monotonic() + busy_timeout_ms() / 1000
    pause = 0.002
    while True:
        try:
            mode = cur.execute("PRAGMA journal_mode").fetchone()[0]
            if mode in ("wal", "memory"):
                return
            if cur.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        else:
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError("database is locked (cannot switch to WAL)")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED and their extended codes
    return "locked" in str(exc) or "busy" in str(exc)


def _on_sqlite_begin(conn: Any) -> None:
    # ORM/Core transactions on SQLite are readers, unless the connection asked to write
    # (WRITE_OPTION): then the lock is taken up front, as the raw write path does.
    write = conn.get_execution_options().get(WRITE_OPTION)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _on_pg_connect(dbapi_conn: Any, _record: Any) -> None:
    # Not in the conninfo: poolers such as pgbouncer refuse startup `options`.
    with dbapi_conn.cursor() as cur:
        cur.execute(f"SET lock_timeout = {busy_timeout_ms()}")
    dbapi_conn.commit()


def _on_pg_begin(conn: Any) -> None:
    if conn.get_execution_options().get(WRITE_OPTION):
        conn.exec_driver_sql(write_lock_sql("postgresql"))


def make_engine(url: str) -> Engine:
    if is_sqlite(url):
        path = sqlite_path(url)
        if path is not None:
            if path.is_dir():
                raise StoreUnavailable("is a directory, not a database file", where=str(path))
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": busy_timeout_ms() / 1000},
        )
        event.listen(engine, "connect", _on_sqlite_connect)
        event.listen(engine, "begin", _on_sqlite_begin)
        return engine
    try:
        engine = create_engine(
            url, pool_pre_ping=True, isolation_level="READ COMMITTED",
            connect_args={"application_name": "todo-harness", "connect_timeout": 10})
    except ModuleNotFoundError as exc:
        raise StoreUnavailable(
            f"the driver for this database is not installed ({exc.name})",
            where=display_url(url), hint="pip install 'todo-harness[postgres]'") from None
    if engine.dialect.name == "postgresql":
        event.listen(engine, "connect", _on_pg_connect)
        event.listen(engine, "begin", _on_pg_begin)
    return engine


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
