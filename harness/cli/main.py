"""The ``harness`` command: a click group, and the one place errors are rendered.

Exit codes: 0 ok, 1 an error you can act on, 2 usage, 3 a database or host that cannot be
reached, 4 a timeout, 130 interrupted (129/143: SIGHUP/SIGTERM to ``harness run``). Errors
are one plain line on stderr; ``--json`` output goes to stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

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
from harness.errors import EXIT_INTERRUPTED, EXIT_USAGE, KNOWN_ERRORS, exit_code, render

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


def main(argv: Sequence[str] | None = None) -> None:
    code = 0
    try:
        rv = cli.main(args=list(argv) if argv is not None else None, prog_name="harness",
                      standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "harness"
        click.echo(f"error: {where}: {exc.format_message()} (try `{where} --help`)", err=True)
        code = EXIT_USAGE
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        code = exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("error: interrupted", err=True)
        code = EXIT_INTERRUPTED
    except KNOWN_ERRORS as exc:
        click.echo(render(exc), err=True)
        code = exit_code(exc)
    except BrokenPipeError:
        code = 0
    finally:
        close_harness()
    sys.exit(code)


if __name__ == "__main__":
    main()
