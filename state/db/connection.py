"""The store's connections and its write lock, without the ORM.

SQLite is opened with the standard library's ``sqlite3`` (no SQLAlchemy): an agent's hook
or ``todowrite`` is a fresh process each time, and importing SQLAlchemy and SQLModel cost
it ~0.4 s of its ~0.5 s (docs/PERFORMANCE.md, "Agent calls"). Every connection gets WAL,
``foreign_keys=ON``, ``busy_timeout`` (``HARNESS_BUSY_TIMEOUT_MS``, default 30 s) and
``synchronous=NORMAL``; the driver's own transaction handling is off, so a write takes the
lock up front with ``BEGIN IMMEDIATE`` (``busy_timeout`` does not save a deferred read
transaction that later tries to write). A store whose file (or directory) we may not
write is opened read-only (``mode=ro``, else ``immutable=1`` when not even the WAL index
can be created), and a write on it says why it cannot.

PostgreSQL (a plain ``postgresql://`` URL) is opened with psycopg2 directly, set up as the
SQLAlchemy engine would set it up (:mod:`state.db.pg`), for the same reason; another server
URL goes through the engine (:mod:`state.db.engine`, imported only then). Writers serialise
on a transaction-level advisory lock (:func:`state.db.dialect.write_lock_sql`).

:class:`Connections` holds one kept writer connection (checking one out and back costs
about as much as a write's SQL), a small pool of reader connections, the write lock with
Ctrl-C held off around it (:mod:`state.interrupts`), and the translation of driver
errors into one-line :class:`~state.errors.StoreError`s naming the database.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import cached_property
from typing import Any

from state.db.dialect import (
    DEFAULT_BUSY_TIMEOUT_MS,
    PG_CHANGE_CHANNEL,
    PG_WRITE_LOCK_KEY,
    WRITE_OPTION,
    busy_timeout_ms,
    notify_sql,
    paramstyle_sql,
    write_lock_sql,
)
from state.db.sqlite import connect_sqlite, read_only_reason
from state.errors import ReadOnlyStore, StoreError, StoreUnavailable, StoreUnreachable
from state.interrupts import InterruptGate, keep_closed
from state.location import display_url, is_sqlite, normalize_url, public_url, sqlite_path
from state.retry import take_budget

_POOL_IDLE = 4  # reader connections kept open per store
# The unique index that holds each write's key once (migration 006_write_keys).
WRITE_KEY_INDEX = "uq_events_op"


class _Pooled:
    """A SQLite or psycopg connection lent out by :class:`Connections`, with the few
    methods of SQLAlchemy's pooled connection that the store uses (so every backend reads
    alike)."""

    __slots__ = ("_owner", "dbapi_connection")

    def __init__(self, owner: Connections, conn: Any):
        self._owner = owner
        self.dbapi_connection: Any = conn

    def cursor(self) -> Any:
        assert self.dbapi_connection is not None
        return self.dbapi_connection.cursor()

    def commit(self) -> None:
        assert self.dbapi_connection is not None
        self.dbapi_connection.commit()

    def rollback(self) -> None:
        assert self.dbapi_connection is not None
        self.dbapi_connection.rollback()

    def close(self) -> None:
        """Give the connection back (idle, for the next reader)."""
        conn, self.dbapi_connection = self.dbapi_connection, None
        if conn is not None:
            self._owner._checkin(conn)

    def invalidate(self) -> None:
        """Close it for good: its state is unknown (a transaction may be open)."""
        conn, self.dbapi_connection = self.dbapi_connection, None
        if conn is not None:
            with suppress(Exception):
                conn.close()


class Connections:
    """One store's connections: the kept writer, readers, the write lock, its errors."""

    def __init__(self, url: str):
        # The retry budget a server URL may carry (``?retry_s=``) is ours, not the driver's.
        self.retry_s: float | None = None
        if "://" in url and not url.startswith("sqlite"):
            url, self.retry_s = take_budget(url)
        self.url = normalize_url(url)
        self.where = display_url(self.url)
        # Printed and used as a key in the user's config: never the password.
        self.public_url = public_url(self.url)
        self.path = sqlite_path(self.url)
        self.sqlite = is_sqlite(self.url)
        self.read_only: str | None = None  # why, when the store cannot be written
        self._immutable = False
        self._pg: Any = None  # a plain PostgreSQL URL's parts: psycopg without the engine
        if not self.sqlite:
            from state.db import pg

            self._pg = pg.parse(self.url)
        if self.sqlite:
            self.dialect = "sqlite"
            if self.path is not None:
                if self.path.is_dir():
                    raise StoreUnavailable("is a directory, not a database file",
                                           where=str(self.path))
                self.read_only = read_only_reason(self.path)
        elif self._pg is not None:
            self.dialect = "postgresql"
        else:
            self.dialect = self.engine.dialect.name
        self._idle: list[Any] = []
        self._pool_lock = threading.Lock()
        self._closed = False
        self._writer_conn: Any = None
        self._writer_lock = threading.Lock()

    # -- the SQLAlchemy engine: PostgreSQL, migrations, Core work, change watching ----------
    @cached_property
    def engine(self) -> Any:
        from state.db.engine import make_engine

        if self.sqlite:
            return make_engine(self.url, creator=self._new_sqlite)
        return make_engine(self.url)

    @cached_property
    def _dbapi_errors(self) -> tuple[type[BaseException], type[BaseException]]:
        """(Error, OperationalError) of the driver."""
        if self.sqlite:
            return sqlite3.Error, sqlite3.OperationalError
        if self._pg is not None:
            from state.db import pg

            return pg.errors()
        dbapi = self.engine.dialect.dbapi
        return dbapi.Error, dbapi.OperationalError

    @property
    def dbapi_error(self) -> type[BaseException]:
        return self._dbapi_errors[0]

    # -- SQLite connections ----------------------------------------------------------------
    def _new_sqlite(self) -> sqlite3.Connection:
        if self.read_only is None:
            return connect_sqlite(self.path)
        if not self._immutable:
            try:
                return connect_sqlite(self.path, read_only=True)
            except sqlite3.OperationalError:
                # Not even the WAL index can be made beside a read-only file in a read-only
                # directory (a backup, a colleague's copy): read it as the snapshot it is.
                self._immutable = True
        return connect_sqlite(self.path, read_only=True, immutable=True)

    def _new_pg(self) -> Any:
        from state.db import pg

        try:
            pg.driver()
        except ModuleNotFoundError as exc:
            raise pg.missing_driver(exc.name, self.where) from None
        with self.errors():
            return pg.connect(self._pg, lock_timeout_ms=busy_timeout_ms(),
                              retry_s=self.retry_s)

    def _checkin(self, conn: Any) -> None:
        if self._pg is not None:
            from state.db import pg

            # A reader's SELECT opened a transaction (psycopg is not in autocommit): end it,
            # as the engine's pool does on return.
            with suppress(Exception):
                if not pg.idle(conn):
                    conn.rollback()
            fit = pg.idle(conn)
        else:
            fit = not conn.in_transaction
        with self._pool_lock:
            if not self._closed and len(self._idle) < _POOL_IDLE and fit:
                self._idle.append(conn)
                return
        with suppress(Exception):
            conn.close()

    def _checkout(self) -> Any:
        with self._pool_lock:
            conn = self._idle.pop() if self._idle else None
        if self._pg is None:
            return conn if conn is not None else self._new_sqlite()
        from state.db import pg

        # A server restart or an idle timeout may have dropped a kept connection.
        while conn is not None and not pg.ping(conn):
            with suppress(Exception):
                conn.close()
            with self._pool_lock:
                conn = self._idle.pop() if self._idle else None
        return conn if conn is not None else self._new_pg()

    def raw(self) -> Any:
        """A DB-API connection of this store (give it back with ``.close()``)."""
        if not self.sqlite and self._pg is None:
            return self.engine.raw_connection()
        return _Pooled(self, self._checkout())

    @contextmanager
    def reader(self) -> Iterator[Any]:
        """A DB-API cursor on a pooled connection, in autocommit (each statement sees the
        latest commit)."""
        with self.errors():
            raw = self.raw()
            try:
                yield raw.cursor()
            finally:
                raw.close()

    # -- errors --------------------------------------------------------------------------
    def _is_driver_error(self, exc: BaseException) -> bool:
        if isinstance(exc, sqlite3.Error):
            return True
        try:
            if ("_dbapi_errors" in self.__dict__ or self._pg is not None) and isinstance(
                    exc, self._dbapi_errors[0]):
                return True
        except ImportError:  # no driver, so not its error; and never a second traceback
            return False
        sa_exc = sys.modules.get("sqlalchemy.exc")  # loaded only where SQLAlchemy is in use
        return sa_exc is not None and isinstance(exc, sa_exc.DBAPIError)

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Turn driver errors into one-line StoreErrors that name the database."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            if not self._is_driver_error(exc):
                raise
            raise self.translate(exc) from None

    def translate(self, exc: BaseException, conn: Any = None) -> StoreError:
        orig = getattr(exc, "orig", None) or exc
        text = str(orig).strip()
        msg = text.splitlines()[0] if text else type(orig).__name__
        low = msg.lower()
        if WRITE_KEY_INDEX in low or "events.op" in low:
            # Our write's key is stored already: its commit landed after all (it lost the
            # race with our look). The operation runs again and finds it.
            return StoreUnreachable(f"cannot use the database ({msg})", where=self.where,
                                    retry_s=self.retry_s)
        if not self.sqlite and self._transient(exc, orig, conn):
            return StoreUnreachable(f"cannot use the database ({msg})", where=self.where,
                                    retry_s=self.retry_s)
        if "locked" in low or "busy" in low or "lock timeout" in low:
            return StoreUnavailable(
                "database is locked by another process", where=self.where,
                hint="wait for it to finish, or raise HARNESS_BUSY_TIMEOUT_MS")
        if "not a database" in low or "malformed" in low:
            return StoreUnavailable(f"not a harness store ({msg})", where=self.where)
        if "readonly" in low or "read-only" in low:
            return ReadOnlyStore(f"the store is read-only ({msg})", where=self.where)
        if "permission denied" in low or "must be owner" in low:
            return StoreError(f"not allowed ({msg})", where=self.where,
                              hint="this database user may not make that change; "
                                   "see docs/teams.md on roles")
        operational = isinstance(orig, self._dbapi_errors[1]) if (
            self.sqlite or self._pg is not None or "_dbapi_errors" in self.__dict__) else False
        sa_exc = sys.modules.get("sqlalchemy.exc")
        if (operational or (sa_exc is not None and isinstance(exc, sa_exc.OperationalError))
                or "unable to open" in low or "connect" in low):
            hint = ("create it first (createdb; see docs/teams.md)"
                    if "database" in low and "does not exist" in low else None)
            return StoreUnavailable(f"cannot use the database ({msg})", where=self.where,
                                    hint=hint)
        return StoreError(f"database error ({msg})", where=self.where)

    def _transient(self, exc: BaseException, orig: BaseException, conn: Any) -> bool:
        from state.db import pg

        sa_exc = sys.modules.get("sqlalchemy.exc")
        if sa_exc is not None and isinstance(exc, sa_exc.DBAPIError) \
                and exc.connection_invalidated:
            return True
        return pg.transient(orig, conn)

    # -- the write lock ------------------------------------------------------------------
    def refuse_if_read_only(self, what: str = "write to it") -> None:
        if self.read_only is not None:
            raise ReadOnlyStore(f"the store is read-only ({self.read_only}): cannot {what}",
                                where=self.where,
                                hint="work on a copy you may write (cp, or "
                                     "`harness db copy`), or ask its owner")

    def _writer(self) -> tuple[Any, bool]:
        """A DB-API connection for one write, and whether it is our kept writer.

        The first writer keeps one connection for itself; concurrent writers in other
        threads take pooled connections as usual.
        """
        if self._writer_lock.acquire(blocking=False):
            if self._writer_conn is None:
                try:
                    self._writer_conn = self.raw()
                except BaseException:
                    self._writer_lock.release()
                    raise
            return self._writer_conn, True
        return self.raw(), False

    def _release(self, raw: Any, kept: bool, broken: bool) -> None:
        if broken:  # never pooled again, whoever owned it
            with suppress(Exception):
                raw.invalidate()
        if not kept:
            raw.close()
            return
        if broken:
            self._writer_conn = None
        self._writer_lock.release()

    def _is_disconnect(self, exc: BaseException, raw: Any, cur: Any) -> bool:
        if self.sqlite:
            return False  # a file does not hang up
        if self._pg is not None:
            from state.db import pg

            return isinstance(exc, self.dbapi_error) and pg.dropped(raw.dbapi_connection)
        return bool(self.engine.dialect.is_disconnect(exc, raw.dbapi_connection, cur))

    def _begin_write(self) -> tuple[Any, bool, Any]:
        """(connection, kept, cursor) with the write lock taken.

        The kept connection may have been dropped by the server while idle (a restart, an
        idle timeout): nothing is written yet, so take a fresh one and try once more.
        """
        raw, kept = self._writer()
        cur = raw.cursor()
        lock = write_lock_sql(self.dialect)
        try:
            cur.execute(lock)
            return raw, kept, cur
        except self.dbapi_error as exc:
            dropped = self._is_disconnect(exc, raw, cur)
            if not dropped:
                try:
                    raw.rollback()
                except self.dbapi_error:
                    dropped = True
            self._release(raw, kept, dropped)
            if not (kept and dropped):
                raise
        raw, kept = self._writer()
        try:
            cur = raw.cursor()
            cur.execute(lock)
        except BaseException:
            self._release(raw, kept, True)
            raise
        return raw, kept, cur

    @contextmanager
    def locked(self) -> Iterator[Any]:
        """A DB-API cursor in a transaction that holds the store's write lock from its
        first statement. Commits on a normal exit, rolls back on any exception.

        Ctrl-C is held off while the lock is taken and given back (:mod:`state.interrupts`)
        and delivered inside the block that rolls back; a connection left with neither
        COMMIT nor ROLLBACK run is discarded, never reused with its transaction open."""
        self.refuse_if_read_only()
        gate = InterruptGate()
        with self.errors():
            try:
                gate.close()
                raw, kept, cur = self._begin_write()
                ended = False  # COMMIT or ROLLBACK ran, so the connection can be reused
                try:
                    try:
                        gate.open()
                        yield cur
                    except BaseException:
                        gate.close()
                        # The body's exception is the news; a connection that cannot roll
                        # back (psycopg interrupted mid-query) is dropped, and the server
                        # ends its transaction.
                        with suppress(self.dbapi_error):
                            self._end(raw, cur, commit=False)
                            ended = True
                        raise
                    gate.close()
                    self._end(raw, cur, commit=True)
                    ended = True
                finally:
                    self._release(raw, kept, broken=not ended)
            except BaseException:
                gate.discard()
                raise
            if not keep_closed(gate):  # the caller holds Ctrl-C past a landed write
                gate.open()

    def _end(self, raw: Any, cur: Any, *, commit: bool) -> None:
        if self.sqlite:  # the transaction was begun by hand: end it by hand
            cur.execute("COMMIT" if commit else "ROLLBACK")
        elif commit:
            raw.commit()
        else:
            raw.rollback()

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Close every connection (the last one to a SQLite file checkpoints its WAL).

        Ctrl-C is held off until all are closed and delivered after: an interrupt in the
        middle used to leave connections for the garbage collector, whose callbacks
        print the KeyboardInterrupt as "Exception ignored" and lose it."""
        gate = InterruptGate()
        gate.close()
        try:
            with self._pool_lock:
                self._closed = True
                idle, self._idle = self._idle, []
            writer, self._writer_conn = self._writer_conn, None
            if writer is not None:
                with suppress(Exception):
                    writer.invalidate() if self.sqlite else writer.close()
            for conn in idle:
                with suppress(Exception):
                    conn.close()
            engine = self.__dict__.pop("engine", None)
            if engine is not None:
                with suppress(Exception):
                    engine.dispose()
        finally:
            gate.open()


__all__ = [
    "DEFAULT_BUSY_TIMEOUT_MS", "PG_CHANGE_CHANNEL", "PG_WRITE_LOCK_KEY", "WRITE_OPTION",
    "Connections", "busy_timeout_ms", "connect_sqlite", "display_url", "is_sqlite",
    "normalize_url", "notify_sql", "paramstyle_sql", "public_url", "sqlite_path",
    "write_lock_sql",
]
