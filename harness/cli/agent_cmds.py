"""`harness todowrite` and `harness todoread`: the agent's side of the list."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness import formats
from harness.agent import READ_FORMATS, agent_actor, todoread, todowrite
from harness.cli.common import common_options, emit_json, harness
from harness.errors import InputError


@click.command("todowrite")
@click.option("--format", "fmt", type=click.Choice(["auto", *formats.FORMATS]), default="auto",
              show_default=True, help="Payload shape; auto detects it from the content.")
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
    `TodoWrite` v1/v2 ({todos:[{content,status,activeForm}]}) and Codex `update_plan`
    ({plan:[{step,status}]}, also with `arguments` as a JSON string). Prints the resulting
    list in the same shape; notes on what others changed go to stderr.
    """
    where = str(path) if path else "stdin"
    if path is not None:
        try:
            with path.open("rb") as fh:
                text = formats.read_limited(fh, where)
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror})", where=where) from None
    else:
        text = formats.read_limited(sys.stdin.buffer, where)
    if not text.strip():
        raise InputError("empty payload (expected one JSON object)", where=where)
    write = formats.parse(formats.loads(text, where), fmt, where)
    h = harness()
    sid = h.session().id
    result = todowrite(h.store, sid, write, actor=agent_actor(actor, write.caps),
                       sees_response=not no_response_view)
    emit_json(result.response())
    for line in result.notes:
        click.echo(f"note: {line}", err=True)


@click.command("todoread")
@click.option("--format", "fmt", type=click.Choice(READ_FORMATS), default="prompt",
              show_default=True,
              help="prompt: a compact block for an agent's context; json: every field; "
                   "opencode/claude/codex: that agent's own shape.")
@common_options
def todoread_cmd(fmt: str) -> None:
    """Print the session's todo list for an agent (or a person)."""
    h = harness()
    sess = h.session()
    click.echo(todoread(h.store, sess.id, fmt, session_name=sess.name))


def register(cli: click.Group) -> None:
    cli.add_command(todowrite_cmd)
    cli.add_command(todoread_cmd)
