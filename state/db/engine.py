"""The SQLAlchemy engine: PostgreSQL's connections, and SQLite's where Core or the ORM is
used (migrations, ``harness db``, change watching). Imported only when needed: the
everyday SQLite paths use :mod:`state.db.connection` and never load SQLAlchemy.

SQLite: the engine's connections come from :func:`state.db.sqlite.connect_sqlite` (the
same pragmas, the same read-only rules), and a Core transaction emits ``BEGIN``, or
``BEGIN IMMEDIATE`` when the connection asked to write (:data:`WRITE_OPTION`).

PostgreSQL: writers serialise on a transaction-level advisory lock, which is what keeps
the event sequence gap-free and totally ordered (see
:func:`state.db.dialect.write_lock_sql`). Connections run at READ COMMITTED whatever the
server's default, because a writer must see every commit made before it got the lock (a
REPEATABLE READ snapshot would be taken before the lock and miss them). ``lock_timeout``
follows ``HARNESS_BUSY_TIMEOUT_MS``, so a writer waits for the lock as long as it would for
a busy SQLite file, then fails with "locked".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import StaticPool

from state.db.dialect import WRITE_OPTION, busy_timeout_ms, write_lock_sql
from state.db.pg import CONNECT_TIMEOUT_S, KEEPALIVES, missing_driver, session_sql
from state.errors import StoreUnavailable
from state.location import display_url, is_sqlite, sqlite_path


def _on_sqlite_begin(conn: Any) -> None:
    # ORM/Core transactions on SQLite are readers, unless the connection asked to write
    # (WRITE_OPTION): then the lock is taken up front, as the raw write path does.
    write = conn.get_execution_options().get(WRITE_OPTION)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _on_pg_connect(dbapi_conn: Any, _record: Any) -> None:
    # Not in the conninfo: poolers such as pgbouncer refuse startup `options`.
    with dbapi_conn.cursor() as cur:
        cur.execute(session_sql(busy_timeout_ms()))
    dbapi_conn.commit()


def _on_pg_begin(conn: Any) -> None:
    if conn.get_execution_options().get(WRITE_OPTION):
        conn.exec_driver_sql(write_lock_sql("postgresql"))


def make_engine(url: str, *, creator: Callable[[], Any] | None = None) -> Engine:
    """The engine for ``url``; SQLite needs ``creator`` (the store's own connections)."""
    if is_sqlite(url):
        assert creator is not None, "SQLite engines take the store's connections"
        # A memory database lives in its one connection: every user must share it.
        pool = {"poolclass": StaticPool} if sqlite_path(url) is None else {}
        engine = create_engine("sqlite://", creator=creator, **pool)
        event.listen(engine, "begin", _on_sqlite_begin)
        return engine
    connect_args: dict[str, Any] = {"application_name": "todo-harness",
                                    "connect_timeout": CONNECT_TIMEOUT_S}
    if url.startswith("postgres"):
        connect_args.update(KEEPALIVES)
    rest = url.split("@")[-1]
    hosts = rest.split("/")[0] + "".join(p for p in rest.partition("?")[2].split("&")
                                         if p.startswith("host="))
    if url.startswith("postgres") and "target_session_attrs" not in url and "," in hosts:
        # Several hosts (a primary and its standbys): connect to the one that takes writes,
        # so a failover is followed by the next connection.
        connect_args["target_session_attrs"] = "read-write"
    try:
        engine = create_engine(
            url, pool_pre_ping=True, isolation_level="READ COMMITTED",
            connect_args=connect_args)
    except ModuleNotFoundError as exc:
        if url.startswith("postgres"):
            raise missing_driver(exc.name, display_url(url)) from None
        raise StoreUnavailable(
            f"the driver for this database is not installed ({exc.name})",
            where=display_url(url), hint="install it with pip") from None
    if engine.dialect.name == "postgresql":
        event.listen(engine, "connect", _on_pg_connect)
        event.listen(engine, "begin", _on_pg_begin)
    return engine


__all__ = ["make_engine"]
