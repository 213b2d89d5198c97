"""The store: open (or create) a database, write events with their projections, read
state back.

The parts live in modules named for them: the connections and the write lock in
:mod:`state.db.connection`, the write transaction in :mod:`state.tx` (:class:`Tx`), the
readers in :mod:`state.read.readers`, the SQL in :mod:`state.db.sql`. This module opens a store
(creating a SQLite file atomically, checking and applying migrations) and starts write
transactions on it.

On SQLite, and on PostgreSQL through a plain ``postgresql://`` URL, nothing here loads
SQLAlchemy unless a migration is due or Core is asked for (:attr:`Store.engine`,
:meth:`Store.locked`): an agent's hook or ``todowrite``, or a person's ``harness list``,
on an up-to-date store never imports it (tests/agents/test_latency_imports.py,
tests/cli/test_cli_latency_imports.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import cached_property
from pathlib import Path
from typing import Any

from state import retry
from state.db.connection import Connections, normalize_url, notify_sql, sqlite_path
from state.db.sql import SQL
from state.errors import InvalidChange, ReadOnlyStore, SchemaTooNew, StoreError, StoreUnavailable
from state.fold import Event, TodoState
from state.read.readers import Readers, SessionInfo
from state.schema.versions import MIGRATION_NAMES
from state.tx import SNAPSHOT_EVERY, Tx
from state.values import normalize_ts, nul_at, utcnow


def _prepare_file(path: Path, *, create: bool, make_dirs: bool) -> bool:
    """Check a SQLite store's file before opening it; create the store if it is missing
    and that is allowed. Returns whether it was created here.

    A missing file is created only in an existing directory unless ``make_dirs`` (a
    mistyped ``--db`` must not quietly make a tree of directories); an empty file is not
    a store (SQLite would silently make it one, hiding a truncated copy).
    """
    where = str(path)
    try:
        size: int | None = path.stat().st_size
    except FileNotFoundError:
        size = None
    except OSError as exc:
        raise StoreUnavailable(f"cannot open ({exc.strerror})", where=where) from None
    if path.is_dir():
        raise StoreUnavailable("is a directory, not a database file", where=where)
    if size == 0:
        size = _wait_for_writer(path)
    if size == 0:
        raise StoreUnavailable("empty file (0 bytes): not a harness store", where=where,
                               hint="remove it to start a new store there, or point --db "
                                    "at the store you meant")
    if size is not None:
        return False
    if not create:
        raise StoreUnavailable("no store here", where=where,
                               hint="check the path, or create one with `harness init`")
    parent = path.parent
    if not parent.is_dir():
        if not make_dirs:
            raise StoreUnavailable(f"no such directory: {parent}", where=where,
                                   hint="check the path; `harness --db PATH init` creates "
                                        "a store and its directories")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create its directory {parent} ({exc.strerror})",
                                   where=where) from None
    return _create_sqlite(path)


def _wait_for_writer(path: Path) -> int:
    """An empty file may be a store another program is creating in place (an older
    harness did): wait, as for any write lock, until nobody writes it; then its size."""
    import sqlite3

    from state.db.connection import busy_timeout_ms

    try:
        conn = sqlite3.connect(str(path), timeout=busy_timeout_ms() / 1000,
                               isolation_level=None)
    except sqlite3.Error:
        return 0
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreUnavailable("database is locked by another process", where=str(path),
                                   hint="wait for it to finish, or raise "
                                        "HARNESS_BUSY_TIMEOUT_MS") from None
        return 0
    finally:
        conn.close()
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _create_sqlite(path: Path) -> bool:
    """Build a new store beside ``path`` and move it into place in one step.

    So a store file is either absent or complete: never the 0-byte or schema-less file a
    process killed during creation used to leave, which the next harness took for a
    store. Two harnesses creating one store at once each build their own; the first to
    link wins and the other opens it.
    """
    import secrets

    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{secrets.token_hex(4)}")
    extra = [Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")]
    try:
        fresh = Store(str(tmp))
        try:
            fresh.upgrade()
        finally:
            fresh.close()  # the last connection checkpoints the WAL into the file
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False  # another harness made it first: theirs is as good as ours
        except OSError:
            # No hard links here (some network file systems): a rename, unless the store
            # appeared meanwhile. (Not atomic against a second creator; links are.)
            if path.exists():
                return False
            os.replace(tmp, path)
            return True
    except PermissionError as exc:
        raise StoreUnavailable(f"cannot create the store ({exc.strerror})",
                               where=str(path)) from None
    finally:
        for p in (tmp, *extra):
            with suppress(OSError):
                p.unlink()


def _write_key() -> tuple[str, bool]:
    """The key of the write about to start, and whether a commit of it may have landed
    already (a retried operation, a hook's spooled payload): state/retry.py."""
    op = retry.current()
    if op is None:
        return retry.new_id(), False
    return op.key(retry.call_site(4)), op.replay


def _landed(tx: Tx) -> None:
    op = retry.current()
    if op is not None:
        op.landed += 1


class Store(Readers):
    """A harness store on SQLite or PostgreSQL. Open with :meth:`Store.open`."""

    def __init__(self, url: str):
        self._conn = Connections(url)
        self.url = self._conn.url
        self.where = self._conn.where
        self.public_url = self._conn.public_url
        self.dialect = self._conn.dialect
        self._q = {name: self._sql(sql) for name, sql in SQL.items()}
        self._notify = notify_sql(self.dialect)
        # session id -> (last event number, todos) as of this process's last commit there.
        self._todo_cache: dict[int, tuple[int, dict[int, TodoState]]] = {}
        # (session, actor) -> when (monotonic) a write transaction of this process by that
        # actor last ended what ran out there and renewed the actor's leases.
        self._leases_seen: dict[tuple[int, str], float] = {}
        self.created = False  # whether :meth:`open` created this store

    @classmethod
    def open(cls, url: str, *, migrate: bool = True, check: bool = True, create: bool = True,
             make_dirs: bool = False) -> Store:
        """Open the store at ``url`` (a SQLite path or an SQLAlchemy URL).

        ``migrate``: apply pending migrations (under the write lock); else refuse a store
        that needs them. ``check=False`` looks at nothing (``harness db info``/``upgrade``).
        A store with a migration this code does not know is always refused when checked.
        A missing SQLite file is created (``create``) if its directory exists, or with
        its directories (``make_dirs``).
        """
        norm = normalize_url(url)
        path = sqlite_path(norm)
        if norm == "sqlite://" or (norm.startswith("sqlite") and path is None):
            raise StoreUnavailable("a store cannot live in memory: give a file",
                                   where=":memory:")
        created = _prepare_file(path, create=create, make_dirs=make_dirs) if path else False
        store = cls(norm)
        store.created = created
        try:
            if check:
                # Opening is read again, and a migration applied again, while the server
                # is unreachable: both find what is done and do the rest.
                retry.again(lambda: store._open_checked(migrate))
        except BaseException:
            store.close()
            raise
        return store

    def _open_checked(self, migrate: bool) -> None:
        """Refuse a store too new for us; apply pending migrations, or refuse them."""
        todo = self.pending_migrations()
        if todo and migrate:
            self._conn.refuse_if_read_only(f"apply its {len(todo)} pending migration(s)")
            try:
                self.upgrade()
            except StoreError as exc:
                if not exc.message.startswith("not allowed"):
                    raise
                raise StoreError(
                    f"database needs {len(todo)} migration(s) that this database "
                    f"user may not apply ({exc.message})", where=self.where,
                    hint="the store's owner runs `harness db upgrade`") from None
        elif todo:
            raise StoreError(f"database needs {len(todo)} migration(s)", where=self.where,
                             hint="run `harness db upgrade`")

    # -- what this store is ---------------------------------------------------------------
    @property
    def engine(self) -> Any:
        """The SQLAlchemy engine (made, and SQLAlchemy imported, on first use)."""
        return self._conn.engine

    @property
    def read_only(self) -> str | None:
        """Why this store cannot be written (None: it can)."""
        return self._conn.read_only

    @property
    def _writer_conn(self) -> Any:
        return self._conn._writer_conn

    @cached_property
    def store_id(self) -> str:
        """This store's random id (migration ``002_store_id``)."""
        row = self._first("SELECT value FROM meta WHERE key = 'store_id'")
        if row is None:
            raise StoreError("the store has no id (meta.store_id)", where=self.where)
        return str(row[0])

    # -- schema ---------------------------------------------------------------------------
    def applied_migrations(self) -> list[str]:
        if self.dialect == "postgresql" and self._conn._pg is not None:
            # As migrations.applied does, without importing SQLAlchemy and the models.
            with self._conn.reader() as cur:
                cur.execute("SELECT to_regclass('migrations') IS NOT NULL")
                if not cur.fetchone()[0]:
                    return []
                cur.execute("SELECT name FROM migrations ORDER BY name")
                return [r[0] for r in cur.fetchall()]
        if self.dialect != "sqlite":
            from state.schema import migrations

            with self._errors(), self.engine.connect() as conn:
                return migrations.applied(conn)
        with self._conn.reader() as cur:
            cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = {r[0] for r in cur.fetchall()}
            if "migrations" not in tables:
                others = sorted(t for t in tables if not t.startswith("sqlite_"))
                if others:
                    shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
                    raise StoreUnavailable(
                        f"a SQLite database, but not a harness store (its tables: {shown})",
                        where=self.where, hint="point --db at a harness store, or at a "
                                               "new file")
                return []
            cur.execute("SELECT name FROM migrations ORDER BY name")
            return [r[0] for r in cur.fetchall()]

    def pending_migrations(self) -> list[str]:
        """Names of the migrations this store still needs (raises if it is too new)."""
        done = set(self.applied_migrations())
        unknown = sorted(done - set(MIGRATION_NAMES))
        if unknown:
            raise SchemaTooNew(
                f"database schema is newer than this harness (it has migration {unknown[-1]!r})",
                where=self.where, hint="upgrade todo-harness, or point --db at another store")
        return [name for name in MIGRATION_NAMES if name not in done]

    def upgrade(self) -> list[str]:
        """Apply pending migrations in one transaction under the write lock, so that two
        harnesses opening a store at once do not both apply them."""
        from state.schema import migrations

        with self.locked() as conn:
            return migrations.upgrade(conn, self.where)

    @contextmanager
    def locked(self) -> Iterator[Any]:
        """A SQLAlchemy Core connection in a transaction that holds the store's write lock.

        For whole-store work (migrations, ``db copy``); everyday writes use :meth:`write`.
        Commits on normal exit, rolls back on an exception.
        """
        from state.db.connection import WRITE_OPTION

        self._conn.refuse_if_read_only()
        with self._errors(), self.engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: True})
            with conn.begin():
                yield conn

    def table_counts(self) -> dict[str, int]:
        """Rows per table, for every table of the schema that exists here."""
        from sqlalchemy import func, inspect, select

        from state.schema.models import ALL_TABLES

        with self._errors(), self.engine.connect() as conn:
            have = set(inspect(conn).get_table_names())
            return {m.__tablename__: conn.execute(  # type: ignore[attr-defined]
                        select(func.count()).select_from(m.__table__)).scalar_one()  # type: ignore[attr-defined]
                    for m in ALL_TABLES if m.__tablename__ in have}  # type: ignore[attr-defined]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors and the write lock (state.db.connection) -------------------------------------
    def _errors(self) -> Any:
        """Turn driver errors into one-line StoreErrors that name the database."""
        return self._conn.errors()

    def _locked(self) -> Any:
        return self._conn.locked()

    # -- writing --------------------------------------------------------------------------
    @contextmanager
    def write(self, session_id: int, actor: str, *, ref: str | None = None,
              heartbeat: bool = True) -> Iterator[Tx]:
        """A write transaction on the session as ``actor``. It is ``actor``'s heartbeat
        (its leases there are renewed) unless ``heartbeat`` is False: an import writes as
        the agent of an old transcript, which says nothing of that agent now."""
        key, check = _write_key()
        with self._locked() as cur:
            tx = Tx(self, cur, session_id, actor, ref, heartbeat=heartbeat, key=key,
                    check=check)
            yield tx
            tx.write_out()
        _landed(tx)
        if tx.landed is None:
            self._todo_cache[session_id] = (tx.state.n, tx.state.todos)

    @contextmanager
    def write_new(self, name: str, *, actor: str, pipeline: str | None = None,
                  parent_id: int | None = None, fork_n: int | None = None,
                  ts: str | None = None, ref: str | None = None,
                  created_by: str | None = None) -> Iterator[Tx]:
        """Create session ``name`` and write to it as ``actor``, in one transaction: a
        failed import or fork leaves no empty session behind. ``created_by`` is the actor
        of the ``session.created`` event (default ``actor``)."""
        if not name or not name.strip():
            raise InvalidChange("a session needs a name")
        if nul_at(name) or nul_at(pipeline):
            raise InvalidChange("a session name contains a NUL character")
        if self.read_only is not None:
            self._conn.refuse_if_read_only(f"create session {name!r}")
        key, check = _write_key()
        with self._locked() as cur:
            cur.execute(self._q["session_id"], (name,))
            row = cur.fetchone()
            replay = False
            if row and check:
                cur.execute(self._q["write_landed"], (key,))
                mine = cur.fetchone()
                # This very write created it, and its acknowledgement was lost: replay.
                replay = mine is not None and mine[0] == row[0]
            if row and not replay:
                raise InvalidChange(f"session {name!r} already exists")
            created = ts or utcnow()
            if replay:
                sid = row[0]
            else:
                cur.execute(self._q["insert_session"],
                            (name, created, pipeline, parent_id, fork_n))
                cur.execute(self._q["session_id"], (name,))
                sid = cur.fetchone()[0]
            tx = Tx(self, cur, sid, actor, ref, key=key, check=replay)
            payload: dict[str, Any] = {"name": name}
            if pipeline:
                payload["pipeline"] = pipeline
            if parent_id is not None:
                payload["parent_id"] = parent_id
                payload["fork_n"] = fork_n
            tx.emit("session.created", payload=payload, ts=created, actor=created_by)
            yield tx
            tx.write_out()
        _landed(tx)
        if tx.landed is None:
            self._todo_cache[sid] = (tx.state.n, tx.state.todos)

    def create_session(self, name: str, *, actor: str, pipeline: str | None = None,
                       parent_id: int | None = None, fork_n: int | None = None,
                       ts: str | None = None) -> int:
        with self.write_new(name, actor=actor, pipeline=pipeline, parent_id=parent_id,
                            fork_n=fork_n, ts=ts) as tx:
            return tx.session_id

    # -- leases (state/leases.py) ------------------------------------------------------------
    def expire_lapsed(self, session_id: int, actor: str = "human") -> list[Event]:
        """End the session's leases that have run out, in a write transaction of their own
        (by ``actor``, who noticed), and return the events; none: no write at all.

        What a read that shows leases calls first. A store this user may not write (a
        read-only file, a PostgreSQL role without the grants) is left as it is: the
        reader shows those leases as run out, and the next writer ends them.
        """
        now, earliest, _due = self.lease_check(session_id)
        if earliest is None or earliest > now or self.read_only is not None:
            return []
        try:
            with self.write(session_id, actor) as tx:
                return tx.expired
        except StoreError as exc:
            if exc.message.startswith("not allowed"):
                return []
            raise

    def leases_checked(self, session_id: int, actor: str, within: float) -> bool:
        """Whether a write by ``actor`` in this process ended what ran out in the session
        and renewed its leases less than ``within`` seconds ago (a hook that wrote need not
        heartbeat again)."""
        at = self._leases_seen.get((session_id, actor))
        return at is not None and time.monotonic() - at < within

    def renew_leases(self, session_id: int, actor: str) -> int:
        """Renew the leases ``actor`` holds in the session that have not run out: one
        UPDATE under the write lock, no event. Returns how many it renewed."""
        with self._locked() as cur:
            cur.execute(self._q["renew_leases"], (session_id, actor))
            return max(cur.rowcount, 0)

    def lapsed_sessions(self) -> list[int]:
        """The sessions that have a lease which ran out (for ``harness sweep``)."""
        return [r[0] for r in self._all(self._q["lapsed_sessions"])]

    # -- change detection ------------------------------------------------------------------
    def watch(self) -> Any:
        """A :class:`state.read.watch.Watch` on its own connection: ``changed()`` says whether
        anything was committed since it was last asked (LISTEN/NOTIFY on PostgreSQL,
        ``PRAGMA data_version`` on SQLite). Close it when done."""
        from state.read.watch import Watch

        return Watch(self.engine)

    def change_token(self, conn: Any) -> Any:
        """A value that moves when another connection commits, read on ``conn`` (a
        SQLAlchemy connection).

        SQLite: ``PRAGMA data_version``. PostgreSQL: the highest event sequence number (an
        index seek; it does not see run-log appends, which write no event). Prefer
        :meth:`watch`, which sees every write and needs no query on PostgreSQL. End
        ``conn``'s transaction after each call: an open one pins SQLite's snapshot.
        """
        if self.dialect == "sqlite":
            return conn.exec_driver_sql("PRAGMA data_version").scalar()
        return conn.exec_driver_sql("SELECT COALESCE(MAX(seq), 0) FROM events").scalar()


__all__ = ["SNAPSHOT_EVERY", "ReadOnlyStore", "SessionInfo", "Store", "Tx", "normalize_ts",
           "utcnow"]
