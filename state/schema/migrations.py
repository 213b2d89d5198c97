"""Versioned schema changes, recorded by name in the ``migrations`` table.

An ordered registry in the manner of simonw/llm's ``migrations.py``: each migration is a
function of a SQLAlchemy connection, applied once, in order, inside one transaction with
its record. ``001_baseline`` creates the tables from the SQLModel classes as they are now,
so every later migration must be idempotent against a database that baseline created
from the current models (check before you ALTER). A database that has applied a migration
this code does not know was written by a newer harness: we refuse to touch it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timezone

from sqlalchemy import Connection, inspect, text
from sqlmodel import SQLModel

from state.errors import SchemaTooNew
from state.schema import models
from state.schema.versions import MIGRATION_NAMES

MigrationFn = Callable[[Connection], None]
MIGRATIONS: list[tuple[str, MigrationFn]] = []


def migration(name: str) -> Callable[[MigrationFn], MigrationFn]:
    def register(fn: MigrationFn) -> MigrationFn:
        MIGRATIONS.append((name, fn))
        return fn
    return register


@migration("001_baseline")
def _baseline(conn: Connection) -> None:
    tables = [m.__table__ for m in models.ALL_TABLES if m is not models.Migration]
    SQLModel.metadata.create_all(conn, tables=tables)  # type: ignore[arg-type]


@migration("002_store_id")
def _store_id(conn: Connection) -> None:
    """A random id for this store, so that two stores sharing a GPU host's workdir never
    mistake each other's jobs (run directories are keyed by it)."""
    has = conn.execute(text("SELECT value FROM meta WHERE key = 'store_id'")).first()
    if has is None:
        conn.execute(text("INSERT INTO meta (key, value) VALUES ('store_id', :v)"),
                     {"v": uuid.uuid4().hex})


@migration("003_import_sources")
def _import_sources(conn: Connection) -> None:
    # A database made by 001 from today's models has it already: create only if missing.
    models.ImportRow.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]


@migration("004_run_series")
def _run_series(conn: Connection) -> None:
    """The points of the series jobs record (``@series`` lines), kept beside their logs."""
    models.RunSeriesRow.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]


@migration("005_claim_leases")
def _claim_leases(conn: Connection) -> None:
    """Claims with leases: who holds a todo and for how long (three columns of ``todos``,
    written by the fold), and the ``leases`` table their heartbeats move."""
    have = {c["name"] for c in inspect(conn).get_columns("todos")}
    for name, kind in (("claimed_by", "VARCHAR"), ("claimed_at", "VARCHAR"),
                       ("lease_s", "FLOAT")):
        if name not in have:
            conn.execute(text(f"ALTER TABLE todos ADD COLUMN {name} {kind}"))
    models.LeaseRow.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]


@migration("006_write_keys")
def _write_keys(conn: Connection) -> None:
    """Each write's client-made key on its first event, unique: a retry whose commit had
    landed finds it and writes nothing twice (state/retry.py)."""
    if "op" not in {c["name"] for c in inspect(conn).get_columns("events")}:
        conn.execute(text("ALTER TABLE events ADD COLUMN op VARCHAR"))
    if "uq_events_op" not in {i["name"] for i in inspect(conn).get_indexes("events")}:
        conn.execute(text("CREATE UNIQUE INDEX uq_events_op ON events (op)"))


# The light copy that opening a store checks against (state/schema/versions.py) must agree.
assert tuple(name for name, _ in MIGRATIONS) == MIGRATION_NAMES, "update state/schema/versions.py"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def applied(conn: Connection) -> list[str]:
    if not inspect(conn).has_table("migrations"):
        return []
    return [r[0] for r in conn.execute(text("SELECT name FROM migrations ORDER BY name"))]


def pending(conn: Connection, where: str) -> list[tuple[str, MigrationFn]]:
    """Migrations still to apply; raise if the database knows migrations we do not."""
    done = set(applied(conn))
    known = {name for name, _ in MIGRATIONS}
    unknown = sorted(done - known)
    if unknown:
        raise SchemaTooNew(
            f"database schema is newer than this harness (it has migration {unknown[-1]!r})",
            where=where, hint="upgrade todo-harness, or point --db at another store")
    return [(name, fn) for name, fn in MIGRATIONS if name not in done]


def upgrade(conn: Connection, where: str) -> list[str]:
    """Apply pending migrations; the caller owns the transaction. Returns their names."""
    todo = pending(conn, where)
    if not todo:
        return []
    models.Migration.__table__.create(conn, checkfirst=True)  # type: ignore[attr-defined]
    for name, fn in todo:
        fn(conn)
        conn.execute(text("INSERT INTO migrations (name, applied_at) VALUES (:n, :t)"),
                     {"n": name, "t": _now()})
    return [name for name, _ in todo]
