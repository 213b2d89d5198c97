"""`harness db info|upgrade|copy`: the store itself, whichever database holds it."""

from __future__ import annotations

import sys
import time

import click

from harness.cli.common import common_options, emit_json, harness, json_option
from harness.paths import current_session, set_current_session
from state.errors import SchemaTooNew, StoreUnavailable
from state.location import display_url, normalize_url, public_url, sqlite_path
from state.maintain.copy import BATCH, copy_store
from state.store import Store


@click.group()
def db() -> None:
    """Look after the store: its schema, its size, moving it to another database.

    The store is a SQLite file by default; a team shares one on PostgreSQL
    (--db postgresql://user@host/dbname, or HARNESS_DB). See docs/teams.md.
    """


def _open_unchecked() -> Store:
    # Looking at a store, or upgrading one, never creates it.
    return Store.open(harness().store_source.value, check=False, create=False)


@db.command("info")
@common_options
@json_option
def info(as_json: bool) -> None:
    """Show the backend, schema version and row counts of the store."""
    store = _open_unchecked()
    try:
        applied = store.applied_migrations()
        try:
            pending = store.pending_migrations()
            too_new = None
        except SchemaTooNew as exc:
            pending, too_new = [], exc.message
        counts = store.table_counts()
        version = store.engine.dialect.server_version_info
        data = {
            "store": store.where, "backend": store.dialect,
            "server_version": ".".join(str(v) for v in version) if version else None,
            "schema": applied[-1] if applied else None, "migrations": applied,
            "pending": pending, "too_new": too_new, "counts": counts,
        }
    finally:
        store.close()
    if as_json:
        emit_json(data)
        return
    click.echo(f"store:   {data['store']}")
    click.echo(f"backend: {data['backend']} {data['server_version'] or ''}".rstrip())
    schema = data["schema"] or "(none: not a harness store yet)"
    if pending:
        schema += f"; {len(pending)} migration(s) pending, run `harness db upgrade`"
    if too_new:
        schema += f"; {too_new}"
    click.echo(f"schema:  {schema}")
    for name, count in counts.items():
        click.echo(f"  {name:<14} {count:>12,}")


@db.command("upgrade")
@click.option("--dry-run", is_flag=True, help="List the pending migrations; apply nothing.")
@common_options
@json_option
def upgrade(dry_run: bool, as_json: bool) -> None:
    """Apply the schema migrations this store still needs.

    Every command migrates a store it opens when its database user may; on a shared
    PostgreSQL store the owner runs this once, so that other roles need no DDL rights.
    All pending migrations are applied in one transaction, under the store's write lock.
    """
    store = _open_unchecked()
    try:
        pending = store.pending_migrations()
        done = [] if dry_run or not pending else store.upgrade()
    finally:
        store.close()
    if as_json:
        emit_json({"store": store.where, "pending": pending if dry_run else [],
                   "applied": done})
        return
    if not pending:
        click.echo(f"{store.where}: schema is up to date")
    elif dry_run:
        click.echo(f"{store.where}: would apply {', '.join(pending)}")
    else:
        click.echo(f"{store.where}: applied {', '.join(done)}")


@db.command("copy")
@click.option("--from", "source", metavar="PATH|URL",
              help="The store to copy (default: the current store, as --db would find it).")
@click.option("--to", "target", metavar="PATH|URL", required=True,
              help="Where to copy it: a SQLite path or a database URL.")
@click.option("--replace", is_flag=True,
              help="Delete what the target already holds (in the same transaction).")
@common_options
@json_option
def copy(source: str | None, target: str, replace: bool, as_json: bool) -> None:
    """Copy a whole store to another database, losslessly (SQLite <-> PostgreSQL).

    Copies every table row for row (events, sessions, todos, runs, run logs,
    verifications, artifacts, snapshots, agent views, the migration records) from one
    snapshot of the source, in one transaction on the target, which must be empty
    unless --replace. Stop writers of the target first; writers of the source may go on
    (what they write after the snapshot is not copied).

    \b
    harness db copy --to postgresql://harness@db.lab/campaign   # the current store
    harness db copy --from postgresql://harness@db.lab/campaign --to backup.db
    """
    resolved = harness().store_source
    src = source or resolved.value
    if source is not None:
        path = sqlite_path(normalize_url(source))
        if path is not None and not path.exists():
            raise StoreUnavailable(
                "--from: no store here", where=str(path),
                hint=f"the store the other commands use is {display_url(normalize_url(resolved.value))} "
                     f"({resolved.how}; `harness where`): leave --from out to copy it")
    started = time.monotonic()
    shown: dict[str, float] = {}

    def progress(table: str, done: int, total: int) -> None:
        # On stderr: for a big table, a line every few seconds and one when it is done.
        now = time.monotonic()
        if total >= BATCH and (done == total or now - shown.get(table, started) > 2):
            shown[table] = now
            click.echo(f"  {table}: {done:,}/{total:,}", err=True)

    report = copy_store(src, target, replace=replace,
                        progress=progress if sys.stderr.isatty() or not as_json else None)
    elapsed = time.monotonic() - started
    carried = _carry_current_session(src, target)
    if as_json:
        emit_json({"from": report.source, "to": report.target, "counts": report.counts,
                   "replaced": report.replaced, "seconds": round(elapsed, 3),
                   "current_session": carried})
        return
    rows = sum(report.counts.values())
    click.echo(f"copied {rows:,} rows ({report.counts.get('events', 0):,} events) "
               f"from {report.source} to {report.target} in {elapsed:.1f}s")
    if carried:
        click.echo(f"your current session there is {carried!r}, as here")


def _carry_current_session(source: str, target: str) -> str | None:
    """The session `harness session use` chose on the source becomes yours on the copy too,
    unless you chose one there already: commands pointed at the copy go on where you were
    (the choice is kept per store, so it would otherwise fall back to `default`)."""
    src_key, dst_key = (public_url(normalize_url(u)) for u in (source, target))
    chosen = current_session(src_key)
    if chosen is None or current_session(dst_key) is not None:
        return None
    set_current_session(dst_key, chosen)
    return chosen


def register(cli: click.Group) -> None:
    cli.add_command(db)
