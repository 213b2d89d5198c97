"""Agents using the harness directly: `harness mcp`, `harness hook claude-code|opencode`,
`harness watch-codex`.

The MCP SDK is imported only when `harness mcp` runs, so other commands (hooks run on
every todo call of an agent) do not pay for it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from harness import formats
from harness.cli.common import common_options, harness
from harness.errors import KNOWN_ERRORS, InputError
from harness.logfile import log, log_path


@click.command("mcp")
@click.option("--actor", metavar="NAME",
              help="Record writes as agent:NAME instead of the client's own name (the "
                   "clientInfo.name of its MCP handshake).")
@common_options
def mcp_cmd(actor: str | None) -> None:
    """Serve the harness to an agent over MCP (stdio).

    Tools: todowrite, todoread, todo_update, pipeline_status, run_logs,
    verification_results, replay. Resources: harness://todos (JSON) and
    harness://todos/prompt for the session, harness://sessions/NAME/todos for another.
    The session is --session, then HARNESS_SESSION, then the current one; a tool's
    `session` argument picks another. Errors come back as tool errors; details of
    unexpected ones go to the data directory's logs/mcp.log.

    \b
    Claude Code:  claude mcp add harness -- harness mcp
    opencode:     "mcp": {"harness": {"type": "local", "command": ["harness", "mcp"]}}
    """
    from harness.mcp_server import serve

    serve(harness(), actor=actor)


def _never_fail(name: str, body: Callable[[], str | None]) -> None:
    """Run a hook body; print what it returns; on any error log it and exit 0 anyway."""
    try:
        out = body()
    except Exception as exc:
        # Our own errors are one line; anything else is a bug, kept with its traceback.
        where = log("hooks", f"{name}: {exc}",
                    None if isinstance(exc, KNOWN_ERRORS) else exc)
        click.echo(f"harness hook {name}: {exc} (logged to {where or log_path('hooks')})",
                   err=True)
        return
    if out:
        click.echo(out)


def _payload(where: str) -> Any:
    text = formats.read_limited(sys.stdin.buffer, where)
    if not text.strip():
        raise InputError("empty hook payload", where=where)
    return formats.loads(text, where)


@click.group("hook")
def hook_group() -> None:
    """Hooks for agents that keep their own todo list: they copy it into the store.

    A hook never stands in the agent's way: on any error it logs to the data directory's
    logs/hooks.log and exits 0.
    """


@hook_group.command("claude-code")
@click.option("--actor", metavar="NAME", default="claude-code", show_default=True,
              help="Record writes as agent:NAME.")
@common_options
def hook_claude_code(actor: str) -> None:
    """A Claude Code hook: give it the hook's JSON payload on stdin.

    \b
    PostToolUse TodoWrite           the whole list is merged into the session
    PostToolUse TaskCreate/Update   one item is created, changed or deleted
    SessionStart                    prints the list as additionalContext, so it
                                    comes back after /compact, /clear or a restart

    \b
    .claude/settings.json:
      {"hooks": {
        "PostToolUse": [{"matcher": "TodoWrite|TaskCreate|TaskUpdate",
          "hooks": [{"type": "command", "command": "harness hook claude-code"}]}],
        "SessionStart": [{"matcher": "startup|resume|clear|compact",
          "hooks": [{"type": "command", "command": "harness hook claude-code"}]}]}}
    """
    from harness.claude_hooks import handle

    name = actor if actor.startswith("agent:") else f"agent:{actor}"
    _never_fail("claude-code", lambda: handle(_payload("claude-code hook payload"),
                                              harness(), actor=name))


@hook_group.command("opencode")
@click.option("--actor", metavar="NAME", default="opencode", show_default=True,
              help="Record writes as agent:NAME.")
@common_options
def hook_opencode(actor: str) -> None:
    """An opencode `todo.updated` event on stdin (the event, or its properties
    {sessionID, todos}); the list is merged into the session. See
    examples/opencode-plugin/ for the plugin that calls this."""
    from harness.agent import todowrite

    name = actor if actor.startswith("agent:") else f"agent:{actor}"

    def body() -> None:
        payload = _payload("opencode event")
        if isinstance(payload, dict) and isinstance(payload.get("properties"), dict):
            payload = payload["properties"]  # the whole event, not just its properties
        write = formats.parse(payload, "opencode", "opencode todo.updated")
        h = harness()
        # opencode never reads a plugin's answer: merge against what it sent.
        todowrite(h.store, h.session(create=True).id, write, actor=name, sees_response=False)
        return None

    _never_fail("opencode", body)


def default_codex_dir() -> Path:
    home = os.environ.get("CODEX_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".codex") / "sessions"


@click.command("watch-codex")
@click.argument("directory", required=False,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between passes over the rollouts.")
@click.option("--once", is_flag=True, help="One pass, then exit (for cron, or a catch-up).")
@click.option("--backfill", is_flag=True,
              help="On the first watch of this store, read the rollouts already there too "
                   "(default: start them at their end).")
@click.option("--actor", metavar="NAME", default="codex", show_default=True,
              help="Record writes as agent:NAME.")
@common_options
def watch_codex(directory: Path | None, interval: float, once: bool, backfill: bool,
                actor: str) -> None:
    """Follow Codex CLI rollouts under DIRECTORY (default $CODEX_HOME/sessions, else
    ~/.codex/sessions) and merge every `update_plan` call into the session as it appears.

    Offsets are remembered per store (data directory, watch-codex.json), so a restart
    neither repeats nor misses a call; rollouts created while it was down are read from
    their start. Prints one line per plan ingested. Stop it with Ctrl-C.
    """
    from harness.codex_watch import CodexWatcher

    root = directory or default_codex_dir()
    if not root.is_dir():
        raise InputError("no such directory", where=str(root),
                         hint="give the Codex sessions directory as an argument")
    name = actor if actor.startswith("agent:") else f"agent:{actor}"
    watcher = CodexWatcher(harness(), root, actor=name, backfill=backfill,
                           echo=lambda line: click.echo(line))
    if not once:
        click.echo(f"watching {root} (every {interval:g}s; Ctrl-C to stop)", err=True)
    watcher.run(interval, passes=1 if once else None)


def register(cli: click.Group) -> None:
    cli.add_command(mcp_cmd)
    cli.add_command(hook_group)
    cli.add_command(watch_codex)

