"""The ``harness`` click application: every command, and click's own errors.

:func:`harness.cli.main.main` runs the few commands agents call on every todo change
without it (:mod:`harness.cli.hot`) and hands everything else here.

Each command's module is imported only when the command is named (:data:`COMMANDS`):
``harness list`` loads click, the todo commands and the light store, not the runner, the
pipeline specs (pydantic, yaml) or SQLAlchemy that ``run``, ``verify``, ``import`` or
``db`` need (~0.5-1 s of imports), nor the other command modules. ``harness --help``
lists every command from the summaries here, without importing any;
tests/cli/test_cli_latency_imports.py checks that each says what its command's own help says.
docs/PERFORMANCE.md, "Everyday commands", has the figures.
"""

from __future__ import annotations

import importlib
import sys

import click

from harness import __version__
from harness.cli.common import CONTEXT_SETTINGS, close_harness, common_options
from harness.errors import EXIT_INTERRUPTED, EXIT_USAGE

# name -> (module in harness.cli, attribute, the first paragraph of its help: what
# `harness --help` shortens to one line, as click would)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "add": ("todo_cmds", "add",
        "Add a todo with TEXT (stored exactly as given)."),
    "block": ("todo_cmds", "block",
        "Block todo ID, with a reason."),
    "cancel": ("todo_cmds", "cancel",
        "Cancel todo ID (t12: kept, shown as cancelled), or stop run RUN (r12: kill its "
        "process group on its host, record it cancelled, block its todo; for a finished serve "
        "run, stop the server it left running)."),
    "check": ("run_cmds", "check",
        "Validate a pipeline spec without running anything; say how much disk the offline "
        "hidden states of its data would take."),
    "db": ("db_cmds", "db",
        "Look after the store: its schema, its size, moving it to another database."),
    "depend": ("todo_cmds", "depend",
        "Set what todo ID waits for (no DEP clears it). Cycles are refused."),
    "doctor": ("agent_io_cmds", "doctor",
        "For each agent program the harness knows, found here: whether its model can write "
        "todos, whether the harness sees them, and what to set if not."),
    "done": ("todo_cmds", "done",
        "Mark todo ID completed."),
    "edit": ("todo_cmds", "edit",
        "Replace the text of todo ID, and/or its stage binding."),
    "export": ("replay_cmds", "export",
        "Write SESSION's events (default: the current session) as JSONL, which `harness "
        "import` reads back: export, import, export gives the same bytes apart from ids."),
    "heartbeat": ("agent_cmds", "heartbeat_cmd",
        "Renew every lease NAME holds in the session: each runs again from now."),
    "hook": ("agent_io_cmds", "hook_group",
        "Hooks for agents that keep their own todo list: they copy it into the store, mark "
        "where the agent's context was cut, and give the list back after each cut."),
    "import": ("replay_cmds", "import_",
        "Import agent transcripts: each todo call becomes the events a live todowrite would "
        "have made, at its original time, with the tool-call id in `ref`."),
    "init": ("session_cmds", "init",
        "Create a project store, DIRECTORY/.harness/state.db (default: here)."),
    "list": ("todo_cmds", "list_",
        "List todos: by section (in progress, pending, blocked, completed, cancelled), then "
        "priority, then position. Shows what each todo is waiting on."),
    "log": ("todo_cmds", "log",
        "Show the session's history: who changed what, when, from what to what."),
    "logs": ("run_cmds", "logs",
        "Print a run's log, as stored (RUN is like r12)."),
    "metrics": ("chart_cmds", "metrics",
        "List the series a stage recorded: each metric (with its labels), its axis, how many "
        "points, the x range and the last, lowest and highest value."),
    "mcp": ("agent_io_cmds", "mcp_cmd",
        "Serve the harness to an agent over MCP (stdio)."),
    "move": ("todo_cmds", "move",
        "Move todo ID among its neighbours on the board (same section and priority)."),
    "next": ("agent_cmds", "next_cmd",
        "The highest-priority todo that is ready: pending, every dependency completed, not "
        "bound to a pipeline stage (`harness run` starts those)."),
    "note": ("todo_cmds", "note",
        "Add a note to todo ID (kept in its history)."),
    "plot": ("chart_cmds", "plot",
        "Draw the series a stage recorded, in the terminal: one chart per METRIC (default: "
        "every one it recorded), a line per label set (per position, per server)."),
    "prime": ("agent_cmds", "prime_cmd",
        "Print what an agent needs in its instructions file (AGENTS.md, CLAUDE.md): how to "
        "keep its todo list in the harness with the CLI, then the current list."),
    "prio": ("todo_cmds", "prio",
        "Set the priority of todo ID: high|medium|low (or H/M/L), or up/down one step."),
    "rebuild": ("replay_cmds", "rebuild",
        "Recreate every projection (todos, runs, verifications, artifacts, snapshots) from "
        "the events alone, and report where the stored ones differed."),
    "replay": ("replay_cmds", "replay",
        "Show a session as it was at any past event or time, step through its changes, "
        "compare two moments, or fork a new session from one."),
    "report": ("chart_cmds", "report",
        "Write one self-contained HTML page about the session, to attach to a message: the "
        "board, each stage's charts, the verification and served tables, and the last "
        "changes. Charts are inline SVG; the page loads nothing else (no script, style sheet "
        "or font from elsewhere)."),
    "run": ("run_cmds", "run_cmd",
        "Run a pipeline: one todo per stage, each run as a detached job that survives "
        "disconnects, its log streamed into the store, completed only when its checks and "
        "gate pass (else blocked with the measured reason)."),
    "session": ("session_cmds", "session",
        "Create, list and switch sessions (one todo list and its history each)."),
    "show": ("todo_cmds", "show",
        "Show one todo: full text, fields, dependencies, notes, history and runs."),
    "start": ("todo_cmds", "start",
        "Mark todo ID in progress."),
    "status": ("run_cmds", "status",
        "Per stage: the todo's status, its last run (host, duration, exit code) and the last "
        "lines of that run's log."),
    "sweep": ("agent_cmds", "sweep_cmd",
        "End the claims whose lease ran out: each todo back to pending, with one event that "
        "says whose lease ran out when, and its last heartbeat."),
    "todoread": ("agent_cmds", "todoread_cmd",
        "Print the session's todo list for an agent (or a person)."),
    "todowrite": ("agent_cmds", "todowrite_cmd",
        "Merge an agent's full todo list (one JSON payload on stdin) into the session."),
    "tui": ("tui_cmd", "tui",
        "Open the board of the current session in the terminal UI."),
    "unblock": ("todo_cmds", "unblock",
        "Unblock todo ID (back to pending)."),
    "verifications": ("verify_cmds", "verifications_cmd",
        "List the session's recorded verifications (stage runs and `harness verify`), oldest "
        "first: verdict, headline figures, the checkpoint and its sha256."),
    "verify": ("verify_cmds", "verify_cmd",
        "Verify an EAGLE-3 drafter CHECKPOINT against its verifier: structure (config, keys, "
        "shapes, dtype, NaN/Inf, d2t/t2d, lm_head rows), vLLM compatibility, and with "
        "--functional measured acceptance (teacher-forced and free-running, lossless against "
        "plain greedy decoding) and projected speedup, against an untrained drafter."),
    "watch-codex": ("agent_io_cmds", "watch_codex",
        "Follow Codex CLI rollouts under DIRECTORY (default $CODEX_HOME/sessions, else "
        "~/.codex/sessions) and merge every `update_plan` call into the session as it "
        "appears."),
    "where": ("session_cmds", "where",
        "Show the store, config directory and session this command would use, and why."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported when named, not at start-up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = self.commands.get(cmd_name)
        if cmd is None and cmd_name in COMMANDS:
            module, attr, _ = COMMANDS[cmd_name]
            cmd = getattr(importlib.import_module(f"harness.cli.{module}"), attr)
            self.add_command(cmd, cmd_name)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own layout, with the summary from COMMANDS for a command not loaded yet
        names = self.list_commands(ctx)
        shown = [n for n in names if n not in self.commands or not self.commands[n].hidden]
        if not shown:
            return
        limit = formatter.width - 6 - max(len(n) for n in shown)
        rows = []
        for name in shown:
            # a stand-in with the summary as its help: click shortens it as it would the
            # command's own
            cmd = self.commands.get(name) or click.Command(name, help=COMMANDS[name][2])
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
