"""Engine set-up for SQLite (the embedded default) and PostgreSQL (teams).

SQLite: WAL, ``foreign_keys=ON`` and ``busy_timeout`` on every pooled connection (a
connect-event listener), ``synchronous=NORMAL``, and the driver's own transaction handling
switched off so that write transactions can take the lock up front with
``BEGIN IMMEDIATE``: ``busy_timeout`` does not save a deferred read transaction that later
tries to write.

PostgreSQL: writers serialise on a transaction-level advisory lock, which is what keeps
the event sequence gap-free and totally ordered (see :func:`write_lock_sql`).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from state.errors import StoreUnavailable

DEFAULT_BUSY_TIMEOUT_MS = 30_000
# Any constant will do; it only has to be the same for every harness on one database.
PG_WRITE_LOCK_KEY = 0x7D0_4A11


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
    mode = cur.execute("PRAGMA journal_mode").fetchone()[0]
    if mode != "wal" and mode != "memory":
        cur.execute("PRAGMA journal_mode = WAL")
    cur.execute("PRAGMA synchronous = NORMAL")
    cur.close()


def _on_sqlite_begin(conn: Any) -> None:
    # ORM/Core transactions on SQLite are readers; writers use BEGIN IMMEDIATE explicitly,
    # or ask for it with the ``write_lock`` execution option (migrations do).
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write_lock")
                         else "BEGIN")


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
        return create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise StoreUnavailable(
            f"the driver for this database is not installed ({exc.name})",
            where=display_url(url), hint="pip install 'todo-harness[postgres]'") from None


def paramstyle_sql(sql: str, dialect: str) -> str:
    """Our raw SQL is written with ``?``; psycopg wants ``%s``."""
    return sql.replace("?", "%s") if dialect == "postgresql" else sql


def write_lock_sql(dialect: str) -> str:
    """The statement that starts a write transaction holding the store's write lock."""
    if dialect == "sqlite":
        return "BEGIN IMMEDIATE"
    return f"SELECT pg_advisory_xact_lock({PG_WRITE_LOCK_KEY})"
