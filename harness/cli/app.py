"""The ``harness`` click application: every command, and click's own errors.

:func:`harness.cli.main.main` runs the few commands agents call on every todo change
without it (:mod:`harness.cli.hot`) and hands everything else here.
"""

from __future__ import annotations

import sys

import click

from harness import __version__
from harness.cli import (
    agent_cmds,
    agent_io_cmds,
    db_cmds,
    replay_cmds,
    run_cmds,
    session_cmds,
    todo_cmds,
    tui_cmd,
    verify_cmds,
)
from harness.cli.common import CONTEXT_SETTINGS, close_harness, common_options
from harness.errors import EXIT_INTERRUPTED, EXIT_USAGE

COMMAND_MODULES = [session_cmds, todo_cmds, agent_cmds, run_cmds, agent_io_cmds, replay_cmds,
                   db_cmds, verify_cmds, tui_cmd]


@click.group(context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
@common_options
@click.version_option(__version__, prog_name="todo-harness")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """todo-harness: a persistent, replayable todo list that drives long engineering
    campaigns (EAGLE-3 drafters for vLLM), locally or over SSH.

    The store is found by --db, then HARNESS_DB, then .harness/state.db in this directory
    or a parent, then the user data directory (`harness where` shows which). Commands act
    on the session given by --session, then HARNESS_SESSION, then `harness session use`,
    then "default".
    """
    if ctx.invoked_subcommand is None:
        tui = cli.get_command(ctx, "tui")
        if tui is not None and sys.stdout.isatty():
            ctx.invoke(tui)
        else:
            click.echo(ctx.get_help())


for module in COMMAND_MODULES:
    module.register(cli)


def run(args: list[str]) -> int:
    """Run one command line; click's errors become one line and an exit code. Our own
    errors (and Ctrl-C) propagate to :func:`harness.cli.main.main`."""
    try:
        rv = cli.main(args=args, prog_name="harness", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "harness"
        click.echo(f"error: {where}: {exc.format_message()} (try `{where} --help`)", err=True)
        return EXIT_USAGE
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo("error: interrupted", err=True)
        return EXIT_INTERRUPTED
    finally:
        close_harness()
