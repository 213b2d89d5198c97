"""The ``harness`` click application: every command, and click's own errors.

:func:`harness.cli.main.main` runs the few commands agents call on every todo change
without it (:mod:`harness.cli.hot`) and hands everything else here.

The commands people type every day (``list``, ``show``, ``add``, ``done``, ``log``,
``session ...``, ``where``, ``--help``) live in modules that import only click and the
light store. The rest (``run``, ``verify``, ``import``, ``db`` ...) pull in the runner,
the pipeline specs (pydantic, yaml) or SQLAlchemy, ~0.5-1 s of imports: their modules are
loaded only when the command is named (:data:`LAZY`), and ``harness --help`` lists them
from their one-line summaries here (tests/test_cli_latency_imports.py checks that these
match the commands' own help). docs/PERFORMANCE.md, "Everyday commands", has the figures.
"""

from __future__ import annotations

import importlib
import sys

import click

from harness import __version__
from harness.cli import agent_cmds, agent_io_cmds, session_cmds, todo_cmds, tui_cmd
from harness.cli.common import CONTEXT_SETTINGS, close_harness, common_options
from harness.errors import EXIT_INTERRUPTED, EXIT_USAGE

COMMAND_MODULES = [session_cmds, todo_cmds, agent_cmds, agent_io_cmds, tui_cmd]

# name -> (module, attribute, the first sentence of its help, as `harness --help` shows it)
LAZY: dict[str, tuple[str, str, str]] = {
    "check": ("harness.cli.run_cmds", "check",
              "Validate a pipeline spec without running anything; say how much disk the "
              "offline hidden states of its data would take."),
    "run": ("harness.cli.run_cmds", "run_cmd",
            "Run a pipeline: one todo per stage, each run as a detached job that survives "
            "disconnects, its log streamed into the store, completed only when its checks "
            "and gate pass (else blocked with the measured reason)."),
    "status": ("harness.cli.run_cmds", "status",
               "Per stage: the todo's status, its last run (host, duration, exit code) and "
               "the last lines of that run's log."),
    "logs": ("harness.cli.run_cmds", "logs", "Print a run's log, as stored (RUN is like r12)."),
    "replay": ("harness.cli.replay_cmds", "replay",
               "Show a session as it was at any past event or time, step through its "
               "changes, compare two moments, or fork a new session from one."),
    "rebuild": ("harness.cli.replay_cmds", "rebuild",
                "Recreate every projection (todos, runs, verifications, artifacts, "
                "snapshots) from the events alone, and report where the stored ones "
                "differed."),
    "import": ("harness.cli.replay_cmds", "import_",
               "Import agent transcripts: each todo call becomes the events a live "
               "todowrite would have made, at its original time, with the tool-call id in "
               "`ref`."),
    "export": ("harness.cli.replay_cmds", "export",
               "Write SESSION's events (default: the current session) as JSONL, which "
               "`harness import` reads back: export, import, export gives the same bytes "
               "apart from ids."),
    "db": ("harness.cli.db_cmds", "db",
           "Look after the store: its schema, its size, moving it to another database."),
    "verify": ("harness.cli.verify_cmds", "verify_cmd",
               "Verify an EAGLE-3 drafter CHECKPOINT against its verifier: structure (config, "
               "keys, shapes, dtype, NaN/Inf, d2t/t2d, lm_head rows), vLLM compatibility, and "
               "with --functional measured acceptance (teacher-forced and free-running, "
               "lossless against plain greedy decoding) and projected speedup, against an "
               "untrained drafter."),
    "verifications": ("harness.cli.verify_cmds", "verifications_cmd",
                      "List the session's recorded verifications (stage runs and `harness "
                      "verify`), oldest first: verdict, headline figures, the checkpoint and "
                      "its sha256."),
}


class LazyGroup(click.Group):
    """A group whose heavy commands are imported when named, not at start-up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = self.commands.get(cmd_name)
        if cmd is None and cmd_name in LAZY:
            module, attr, _ = LAZY[cmd_name]
            cmd = getattr(importlib.import_module(module), attr)
            self.add_command(cmd, cmd_name)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own layout, with a summary from LAZY for a command not loaded yet
        names = self.list_commands(ctx)
        shown = [n for n in names if n not in self.commands or not self.commands[n].hidden]
        if not shown:
            return
        limit = formatter.width - 6 - max(len(n) for n in shown)
        rows = []
        for name in shown:
            # a stand-in with the summary as its help: click shortens it as it would the
            # command's own
            cmd = self.commands.get(name) or click.Command(name, help=LAZY[name][2])
            rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
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
