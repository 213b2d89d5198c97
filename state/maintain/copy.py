"""Copy a whole store to another database (SQLite <-> PostgreSQL, or either to itself).

Every table of the schema is copied row for row, values as they are stored: events,
sessions, the projections, snapshots, run logs, agent views, and the ``migrations`` rows
themselves (with their original dates), so the copy is the same store, not a replay of
it. The source is read in one snapshot (a REPEATABLE READ transaction on PostgreSQL, one
read transaction on SQLite). The target is written in one transaction that holds its
write lock, creates or upgrades its schema, and commits only if every table's row count
matches the source's: a failed copy leaves the target as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, delete, func, select, text
from sqlmodel import SQLModel

from state.db.connection import normalize_url, sqlite_path
from state.errors import InvalidChange, StoreError, StoreUnavailable
from state.schema import migrations
from state.schema.models import ALL_TABLES
from state.store import Store

# progress(table, rows copied so far, rows in that table)
Progress = Callable[[str, int, int], None]
BATCH = 5000


def tables() -> list[Table]:
    """The schema's tables, parents before children (foreign-key order)."""
    ours = {m.__tablename__ for m in ALL_TABLES}  # type: ignore[attr-defined]
    return [t for t in SQLModel.metadata.sorted_tables if t.name in ours]


@dataclass
class CopyReport:
    source: str
    target: str
    counts: dict[str, int] = field(default_factory=dict)
    replaced: dict[str, int] = field(default_factory=dict)


def _counts(conn: Connection, which: list[Table]) -> dict[str, int]:
    return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in which}


def _reset_sequences(out: Connection, which: list[Table]) -> None:
    """PostgreSQL serial columns (``sessions.id``) must continue after the copied ids."""
    for t in which:
        pk = list(t.primary_key.columns)
        if len(pk) != 1:
            continue
        seq = out.execute(text("SELECT pg_get_serial_sequence(:t, :c)"),
                          {"t": t.name, "c": pk[0].name}).scalar()
        if seq:
            top = out.execute(select(func.max(pk[0]))).scalar()
            out.execute(text("SELECT setval(:s, :v, :called)"),
                        {"s": seq, "v": top or 1, "called": top is not None})


def copy_store(source: str, target: str, *, replace: bool = False, batch: int = BATCH,
               progress: Progress | None = None) -> CopyReport:
    """Copy the store at ``source`` into ``target`` (paths or URLs); see the module doc.

    ``target`` must hold no data unless ``replace``, which deletes what it holds in the
    same transaction. The source must be at this harness's schema version.
    """
    path = sqlite_path(normalize_url(source))
    if path is not None and not path.exists():
        raise StoreUnavailable("no store here", where=str(path))
    src = Store.open(source, migrate=False)
    try:
        dst = Store.open(target, check=False)
    except BaseException:
        src.close()
        raise
    try:
        if src.url == dst.url:
            raise InvalidChange("source and target are the same store", where=src.where)
        report = CopyReport(source=src.where, target=dst.where)
        _copy(src, dst, report, replace=replace, batch=batch, progress=progress)
        return report
    finally:
        src.close()
        dst.close()


def _copy(src: Store, dst: Store, report: CopyReport, *, replace: bool, batch: int,
          progress: Progress | None) -> None:
    order = tables()
    with src._errors(), src.engine.connect() as inp:
        if src.dialect == "postgresql":
            inp.execution_options(isolation_level="REPEATABLE READ")
        with inp.begin():
            have = _counts(inp, order)
            with dst.locked() as out:
                migrations.upgrade(out, dst.where)
                if migrations.applied(out) != migrations.applied(inp):
                    raise StoreError("source and target schemas differ after upgrade",
                                     where=dst.where)
                # A fresh store already holds its migration rows and its own id in `meta`;
                # neither is data. The copy carries the source's id over: a moved store is
                # the same store, and its jobs on GPU hosts are keyed by that id.
                held = {k: v for k, v in _counts(out, order).items()
                        if v and k not in ("migrations", "meta")}
                if held and not replace:
                    what = ", ".join(f"{v:,} {k}" for k, v in held.items())
                    raise InvalidChange(f"target is not empty ({what})", where=dst.where,
                                        hint="pass --replace to delete what it holds")
                report.replaced = held
                # Children first; the target's own migration rows give way to the source's.
                for t in reversed(order):
                    out.execute(delete(t))
                for t in order:
                    _copy_table(inp, out, t, have[t.name], batch, progress, dst.where)
                    report.counts[t.name] = have[t.name]
                if dst.dialect == "postgresql":
                    _reset_sequences(out, order)
                got = _counts(out, order)
                if got != have:
                    raise StoreError(f"copy incomplete: target has {got}, source {have}",
                                     where=dst.where)


def _copy_table(inp: Connection, out: Connection, t: Table, total: int, batch: int,
                progress: Progress | None, where: str) -> None:
    done = 0
    if progress:
        progress(t.name, 0, total)
    if not total:
        return
    q = select(t).order_by(*t.primary_key.columns)
    result = inp.execution_options(yield_per=batch).execute(q)
    for part in result.partitions(batch):
        rows: list[dict[str, Any]] = [dict(r._mapping) for r in part]
        try:
            out.execute(t.insert(), rows)
        except StoreError:
            raise
        except Exception as exc:
            orig = getattr(exc, "orig", exc)
            line = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
            raise StoreError(f"cannot copy table {t.name} ({line})", where=where) from None
        done += len(rows)
        if progress:
            progress(t.name, done, total)


__all__ = ["CopyReport", "copy_store", "tables"]
