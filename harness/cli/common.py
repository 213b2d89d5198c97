"""Pieces every command shares: --db/--session, the Harness object, JSON output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from harness.context import Harness

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
F = TypeVar("F", bound=Callable[..., Any])

_current: Harness | None = None


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value is not None:
            ctx.find_root().meta[key] = value
        return value
    return callback


def common_options(fn: F) -> F:
    """``--db`` and ``--session``, accepted before or after the subcommand."""
    fn = click.option("--session", "-s", metavar="NAME", expose_value=False, is_eager=True,
                      callback=_remember("harness.session"),
                      help="Session to act on (default: HARNESS_SESSION, then the current "
                           "one).")(fn)
    fn = click.option("--db", metavar="PATH|URL", expose_value=False, is_eager=True,
                      callback=_remember("harness.db"),
                      help="Store: a SQLite path or an SQLAlchemy URL (default: HARNESS_DB, "
                           "then .harness/state.db here or above, then the user data "
                           "directory).")(fn)
    return fn


def harness(*, announce: bool = True) -> Harness:
    """The Harness for this invocation, built from the options seen so far.
    ``announce=False``: say nothing on stderr when the store is created (hooks, MCP)."""
    global _current
    if _current is None:
        meta = click.get_current_context().find_root().meta
        _current = Harness(db=meta.get("harness.db"), session=meta.get("harness.session"),
                           announce=announce)
    return _current


def close_harness() -> None:
    global _current
    if _current is not None:
        _current.close()
        _current = None


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
