"""`harness init`, `harness where`, `harness session new|list|use|set`."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.common import common_options, emit_json, harness, json_option
from harness.errors import NoSession, UsageError
from harness.paths import (
    DEFAULT_SESSION,
    PROJECT_DIR,
    STORE_FILE,
    config_dir,
    current_session,
    set_current_session,
)
from state.store import Store


@click.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.pass_context
def init(ctx: click.Context, directory: Path | None) -> None:
    """Create a project store, DIRECTORY/.harness/state.db (default: here).

    Commands run in DIRECTORY or below then use it (unless --db or HARNESS_DB say
    otherwise). With `harness --db PATH init`, create the store at PATH instead, with its
    directories: other commands create a missing store only in a directory that exists.
    """
    db = ctx.find_root().meta.get("harness.db")
    if db is not None and directory is not None:
        raise UsageError("give either DIRECTORY or --db, not both")
    target = db if db is not None else str((directory or Path.cwd()) / PROJECT_DIR / STORE_FILE)
    store = Store.open(target, make_dirs=True)
    store.close()
    click.echo(f"{'created' if store.created else 'using existing'} store {store.where}")


@click.command()
@common_options
@json_option
def where(as_json: bool) -> None:
    """Show the store, config directory and session this command would use, and why."""
    h = harness()
    store_src = h.store_source
    session_src = h.session_source
    info = {
        "store": h.store.where, "store_url": h.store.public_url, "store_from": store_src.how,
        "backend": h.store.dialect, "config_dir": str(config_dir()),
        "session": session_src.value, "session_from": session_src.how,
    }
    if as_json:
        emit_json(info)
        return
    click.echo(f"store:   {info['store']}  ({info['backend']}, from {info['store_from']})")
    click.echo(f"session: {info['session']}  (from {info['session_from']})")
    click.echo(f"config:  {info['config_dir']}")


@click.group()
def session() -> None:
    """Create, list and switch sessions (one todo list and its history each)."""


@session.command("new")
@click.argument("name")
@click.option("--use/--no-use", default=True, show_default=True,
              help="Make it the current session for this store.")
@common_options
def session_new(name: str, use: bool) -> None:
    """Create session NAME (and switch to it)."""
    h = harness()
    h.store.create_session(name, actor="human")
    if use:
        set_current_session(h.store.public_url, name)
    click.echo(f"created session {name}" + (" (now current)" if use else ""))


@session.command("list")
@common_options
@json_option
def session_list(as_json: bool) -> None:
    """List the sessions in the store."""
    from harness.agents.leases import stored_session_lease
    from harness.render import duration_text

    h = harness()
    current = current_session(h.store.public_url) or "default"
    counts = h.store.session_counts()
    rows = []
    for s in h.store.sessions():
        c = counts.get(s.id, {})
        total = sum(v for k, v in c.items() if k != "events")
        rows.append({"name": s.name, "current": s.name == current, "todos": total,
                     "completed": c.get("completed", 0), "blocked": c.get("blocked", 0),
                     "events": c.get("events", 0), "pipeline": s.pipeline,
                     "created_at": s.created_at, "parent_id": s.parent_id,
                     "claim_lease_s": stored_session_lease(h.store, s.id) or None})
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no sessions yet (one named 'default' is created on first use)")
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        mark = "*" if r["current"] else " "
        extra = f"  pipeline {r['pipeline']}" if r["pipeline"] else ""
        if r["claim_lease_s"]:
            extra += f"  claim-lease {duration_text(r['claim_lease_s'])}"
        click.echo(f"{mark} {r['name']:<{width}}  {r['completed']}/{r['todos']} done"
                   f"  {r['blocked']} blocked  {r['events']} events{extra}")


@session.command("use")
@click.argument("name")
@common_options
def session_use(name: str) -> None:
    """Make NAME the current session for this store (for you, not for others). The
    session `default` needs no creating: it is made on first use, as everywhere."""
    h = harness()
    if h.store.session_by_name(name) is None and name != DEFAULT_SESSION:
        raise NoSession(f"no session named {name!r}", where=h.store.where,
                        hint=f"create it with `harness session new {name}`")
    set_current_session(h.store.public_url, name)
    click.echo(f"now using session {name}")


# session settings: name -> what it is (shown in errors and the help)
SETTINGS = {"claim-lease": "the lease of a claim made without --lease (15m, 90s, 1h30m; "
                           "`none`: claims never expire)"}


@session.command("set")
@click.argument("key", metavar="KEY")
@click.argument("value", metavar="VALUE")
@common_options
def session_set(key: str, value: str) -> None:
    """Set KEY to VALUE for the current session, for everyone who uses it.

    Keys: `claim-lease`, the lease of a claim made without --lease (`harness next --claim`,
    the MCP tool claim_next): 15m, 90s, 1h30m, or `none` for claims that never expire
    (the default).
    """
    from harness.agents.leases import SETTING, set_session_lease
    from harness.render import duration_text
    from harness.todos import parse_lease

    if key != SETTING:
        raise UsageError(f"unknown session setting {key!r} (known: {', '.join(SETTINGS)})",
                         where="harness session set")
    seconds = parse_lease(value, where=f"session set {key}")
    h = harness()
    sess = h.session()
    set_session_lease(h.store, sess.id, seconds)
    click.echo(f"session {sess.name}: claims last "
               + (f"{duration_text(seconds)} without a sign of life" if seconds
                  else "until their todo leaves in progress (no lease)"))


def register(cli: click.Group) -> None:
    for cmd in (init, where, session):
        cli.add_command(cmd)
