"""`harness todowrite`, `todoread`, `next`, `heartbeat`, `sweep` and `prime`: the agent's
side of the list.

The first four run through :mod:`harness.cli.hot` when their command line is plain (no
click, no SQLAlchemy); these click commands are the same bodies for every other line
(``--help``, unusual spellings), and the reference for docs/cli.md.
"""

from __future__ import annotations

from pathlib import Path

import click

from harness.agents.registry import names
from harness.cli import hot
from harness.cli.common import common_options, harness, json_option

TODOWRITE_FORMATS = click.Choice(list(hot.TODOWRITE_FORMATS))


@click.command("todowrite")
@click.option("--format", "fmt", type=TODOWRITE_FORMATS, default="auto", show_default=True,
              help="Payload shape; auto detects it from the content.")
@click.option("--actor", metavar="NAME",
              help="Agent name, recorded as agent:NAME (default: the format's name).")
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="Read the payload from a file instead of stdin.")
@click.option("--no-response-view", is_flag=True, hidden=True,
              help="The agent never reads our answer (hooks): merge against what it sent.")
@common_options
def todowrite_cmd(fmt: str, actor: str | None, path: Path | None, no_response_view: bool) -> None:
    """Merge an agent's full todo list (one JSON payload on stdin) into the session.

    Accepts opencode `todowrite` ({todos:[{content,status,priority[,id]}]}), Claude Code
    `TodoWrite` v1/v2 ({todos:[{content,status,activeForm}]}), Codex `update_plan`
    ({plan:[{step,status}]}, also with `arguments` as a JSON string) and Gemini CLI
    `write_todos` ({todos:[{description,status}]}). Prints the resulting
    list in the same shape; notes on what others changed go to stderr.
    """
    hot.todowrite(harness(), fmt=fmt, actor=actor, path=path,
                  no_response_view=no_response_view)


@click.command("todoread")
@click.option("--format", "fmt", type=click.Choice(list(hot.TODOREAD_FORMATS)),
              default="prompt", show_default=True,
              help="prompt: a compact block for an agent's context; json: every field; "
                   "opencode/claude/codex/gemini: that agent's own shape.")
@common_options
def todoread_cmd(fmt: str) -> None:
    """Print the session's todo list for an agent (or a person)."""
    hot.todoread(harness(), fmt)


@click.command("next")
@click.option("--claim", is_flag=True,
              help="Mark it in progress by --actor, in the same transaction that chose it: "
                   "two agents asking at once never get the same todo.")
@click.option("--actor", metavar="NAME",
              help="Who claims it, recorded as agent:NAME (default: human).")
@click.option("--lease", metavar="DURATION",
              help="With --claim: the claim ends (the todo back to pending) after this long "
                   "without a sign of life from NAME (15m, 90s, 1h30m; `none`: never). "
                   "Default: the session's claim-lease (`harness session set`), else never.")
@common_options
@json_option
def next_cmd(claim: bool, actor: str | None, lease: str | None, as_json: bool) -> None:
    """The highest-priority todo that is ready: pending, every dependency completed, not
    bound to a pipeline stage (`harness run` starts those).

    Exits 0 with a todo, 1 when nothing is ready (and says why), so a worker can loop:
    `while harness next --claim --actor w1; do ...; done`. A claim with a lease is
    renewed by every hook and MCP call NAME makes, and by `harness heartbeat --actor NAME`.
    """
    code = hot.next_todo(harness(), claim=claim, actor=actor, as_json=as_json, lease=lease)
    if code:
        raise click.exceptions.Exit(code)


@click.command("heartbeat")
@click.option("--actor", metavar="NAME",
              help="Whose leases, as agent:NAME (default: human).")
@common_options
@json_option
def heartbeat_cmd(actor: str | None, as_json: bool) -> None:
    """Renew every lease NAME holds in the session: each runs again from now.

    A lease that ran out before this heartbeat is not taken back: its todo went back to
    pending (maybe to another agent); it is said on stderr, once, and NAME must claim work
    again. Exits 0 while NAME holds a lease, 1 when it holds none. Hook and MCP calls
    renew an agent's leases by themselves; this is for agents that work without them.
    """
    code = hot.heartbeat(harness(), actor=actor, as_json=as_json)
    if code:
        raise click.exceptions.Exit(code)


@click.command("sweep")
@click.option("--all-sessions", "all_sessions", is_flag=True,
              help="Every session of the store, not only the current one.")
@common_options
@json_option
def sweep_cmd(all_sessions: bool, as_json: bool) -> None:
    """End the claims whose lease ran out: each todo back to pending, with one event that
    says whose lease ran out when, and its last heartbeat.

    Claims and reads of the session (`next`, `list`, `show`, hooks, MCP calls) do this as
    they notice; a sweep is for a session nobody reads. Leases still running are never
    touched: the sweep runs under the store's write lock, as renewals do.
    """
    from harness.agents.leases import sweep
    from harness.cli.common import emit_json
    from harness.render import describe, expiry_text
    from state.leases import expired_lease

    h = harness()
    ids = None if all_sessions else [h.session().id]
    events = sweep(h.store, ids)
    names = {s.id: s.name for s in h.store.sessions()} if events else {}
    if as_json:
        emit_json([{**e.to_json(), "session": names.get(e.session_id),
                    "description": describe(e)} for e in events])
        return
    for e in events:
        click.echo(f"session {names.get(e.session_id, e.session_id)}: t{e.todo_id}: "
                   f"{expiry_text(expired_lease(e) or {})}; back to pending")
    if not events:
        click.echo("no lease has run out")


@click.command("prime")
@click.option("--agent", type=click.Choice(["any", *names()]),
              default="any", show_default=True,
              help="Word the instructions for this agent's tools.")
@click.option("--no-list", is_flag=True, help="Only the instructions, not the current list.")
@common_options
def prime_cmd(agent: str, no_list: bool) -> None:
    """Print what an agent needs in its instructions file (AGENTS.md, CLAUDE.md): how to
    keep its todo list in the harness with the CLI, then the current list.

    For models that have no todo tool of their own (or MCP): `harness prime >> AGENTS.md`,
    or have the agent run it at the start of its work. Kept within 1,500 tokens
    (cl100k_base; docs/PERFORMANCE.md), the list cut short with a count if it is long.
    """
    from harness.agents.prime import prime_text

    h = harness()
    click.echo(prime_text(h, agent=agent, with_list=not no_list))


def register(cli: click.Group) -> None:
    for cmd in (todowrite_cmd, todoread_cmd, next_cmd, heartbeat_cmd, sweep_cmd, prime_cmd):
        cli.add_command(cmd)
