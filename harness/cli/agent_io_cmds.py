"""Agents using the harness directly: `harness mcp`, `harness hook AGENT` (and its
`install` and `uninstall`) for each agent of the registry, `harness watch-codex`,
`harness doctor`. Every agent is reached through :mod:`harness.agents.registry`: no
agent's package is imported here.

The MCP SDK is imported only when `harness mcp` runs; the hooks themselves run through
:mod:`harness.cli.hot` (no click at all) on every todo call of an agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from harness.agents.registry import agent as registry_agent
from harness.agents.registry import names
from harness.agents.seam import Agent, Installed
from harness.cli import hot
from harness.cli.common import common_options, harness
from harness.errors import InputError


@click.command("mcp")
@click.option("--actor", metavar="NAME",
              help="Record writes as agent:NAME instead of the client's own name (the "
                   "clientInfo.name of its MCP handshake).")
@click.option("--tools", metavar="A,B,C",
              help="Serve only these tools (their schemas cost the agent's context; see "
                   "docs/PERFORMANCE.md). Default: all.")
@click.option("--agent", type=click.Choice(list(names())),
              help="Serve beside this agent's hooks: write as agent:AGENT, to the session "
                   "its hooks use (found from the project directory, CLAUDE_PROJECT_DIR or "
                   "here, as they find it). `harness hook claude-code install` registers "
                   "the server so.")
@common_options
def mcp_cmd(actor: str | None, tools: str | None, agent: str | None) -> None:
    """Serve the harness to an agent over MCP (stdio).

    Tools: todowrite, todoread, todo_update, claim_next, pipeline_status, run_stage,
    run_logs, verification_results, replay. Resources: harness://todos (JSON) and
    harness://todos/prompt for the session, harness://sessions/NAME/todos for another.
    The session is --session, then HARNESS_SESSION, then the current one; a tool's
    `session` argument picks another. Errors come back as tool errors; details of
    unexpected ones go to the data directory's logs/mcp.log.

    \b
    Claude Code:  claude mcp add harness -- harness mcp
    opencode:     "mcp": {"harness": {"type": "local", "command": ["harness", "mcp"]}}
    Codex:        [mcp_servers.harness] command = "harness", args = ["mcp"]
    """
    from harness.agents.mcp_server import serve
    from harness.agents.tools import select_tools

    chosen = select_tools(tools)  # a bad name fails here, before the server starts
    if agent is None:
        serve(harness(announce=False), actor=actor, tools=chosen)
        return
    from harness.agents.mcp_server import INSTRUCTIONS
    from harness.context import Harness

    plugin = registry_agent(agent)
    meta = click.get_current_context().find_root().meta
    payload = {"cwd": str(Path.cwd())}  # what a hook payload says of the project
    serve(Harness(meta.get("harness.db"), plugin.session_for(payload,
                                                             meta.get("harness.session")),
                  announce=False, cwd=plugin.project_dir(payload)),
          actor=actor or agent, tools=chosen, instructions=INSTRUCTIONS + plugin.mcp_instructions,
          labels=plugin.labels)


@click.group("hook")
def hook_group() -> None:
    """Hooks for agents that keep their own todo list: they copy it into the store, mark
    where the agent's context was cut, and give the list back after each cut.

    A hook never stands in the agent's way: on any error it logs to the data directory's
    logs/hooks.log and exits 0. `harness hook AGENT install` writes the hooks into the
    agent's settings (for pi, an extension), and `uninstall` removes them.
    """


def _run_hook(agent: str, actor: str, event: str | None = None,
              payload: str | None = None) -> None:
    """The hook's body, as the fast route runs it (:func:`harness.cli.hot.hook`), with the
    global --db and --session click read."""
    meta = click.get_current_context().find_root().meta
    hot.hook(agent, db=meta.get("harness.db"), session=meta.get("harness.session"),
             actor=actor, event=event, payload=payload)


def _hook_command(plugin: Agent) -> click.Command:
    """``harness hook NAME`` for one agent of the registry: its hook, and its ``install``
    and ``uninstall`` where it has them."""
    params: list[click.Parameter] = [
        click.Option(["--actor"], metavar="NAME", default=plugin.name, show_default=True,
                     help="Record writes as agent:NAME.")]
    if plugin.hook_events:
        params.insert(0, click.Option(["--event"], type=click.Choice(list(plugin.hook_events)),
                                      help=f"The hook's event ({plugin.title}'s payloads do "
                                           "not say it)."))
    if plugin.hook_payload_arg:
        params.append(click.Option(["--payload"], metavar="JSON",
                                   help="The payload itself (default: read stdin)."))

    def run(actor: str, event: str | None = None, payload: str | None = None) -> None:
        ctx = click.get_current_context()
        if isinstance(ctx.command, click.Group) and ctx.invoked_subcommand is not None:
            return
        _run_hook(plugin.name, actor, event, payload)

    if plugin.install_help is None:
        cmd: click.Command = click.Command(plugin.name, callback=run, params=params,
                                           help=plugin.hook_help)
    else:
        group = click.Group(plugin.name, callback=run, params=params, help=plugin.hook_help,
                            invoke_without_command=True)
        group.add_command(_install_command(plugin))
        group.add_command(_uninstall_command(plugin))
        cmd = group
    return common_options(cmd)


def _scope_options() -> list[click.Parameter]:
    return [click.Option(["--project", "scope"], flag_value="project", default=True,
                         help="This project's settings (the default)."),
            click.Option(["--user", "scope"], flag_value="user",
                         help="The user's settings (~/...), for every project."),
            click.Option(["--dry-run"], is_flag=True,
                         help="Show the change as a diff; write nothing.")]


def _install_command(plugin: Agent) -> click.Command:
    params: list[click.Parameter] = [
        click.Option(["--command", "command"], metavar="CMD",
                     help="The command the hooks run (default: this harness, as "
                          "`harness hook AGENT`)."),
        *_scope_options()]
    for opt in plugin.install_options:
        if opt.flag_value is None:
            params.append(click.Option([opt.flag, opt.dest], metavar=opt.metavar,
                                       default=opt.default, help=opt.help))
        else:
            params.append(click.Option([opt.flag, opt.dest], flag_value=opt.flag_value,
                                       default=opt.default, help=opt.help))

    def run(scope: str, dry_run: bool, command: str | None, **options: Any) -> None:
        done = plugin.install(scope=scope, cwd=Path.cwd(), command=command,
                              dry_run=dry_run, **options)
        _show(done, dry_run)

    return click.Command("install", callback=run, params=params, help=plugin.install_help)


def _uninstall_command(plugin: Agent) -> click.Command:
    def run(scope: str, dry_run: bool) -> None:
        done = plugin.uninstall(scope=scope, cwd=Path.cwd())
        _show(done, dry_run, removing=True)

    return click.Command("uninstall", callback=run, params=_scope_options(),
                         help=f"Remove what `harness hook {plugin.name} install` wrote, and "
                              "nothing else (--project, the default, or --user).")


def _show(done: Installed, dry_run: bool, removing: bool = False) -> None:
    """Write (or, with --dry-run, show) an install's plans, then say what it did and
    what is left to the person."""
    for plan in done.plans:
        if dry_run:
            click.echo(plan.diff or f"{plan.path}: "
                       + ("nothing of the harness's here (nothing to remove)" if removing
                          else "already up to date (nothing to change)"))
        elif not plan.changed:
            click.echo(f"{plan.path}: "
                       + ("nothing of the harness's here" if removing else "already up to date"))
        else:
            plan.write()
            what = []
            if plan.events:
                what.append(f"{plan.action} ({', '.join(plan.events)})")
            if plan.settings:
                what.append(f"set {', '.join(plan.settings)}")
            click.echo(f"{plan.path}: {'; '.join(what)}")
    for line in done.notes:
        click.echo(f"note: {line}")
    for line in done.lines:
        click.echo(line)
    for line in done.left:  # what install could not do for the person
        click.echo(f"{'still to do' if not dry_run else 'then still to do'}: {line}")


for _name in names():
    hook_group.add_command(_hook_command(registry_agent(_name)))


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
    codex = registry_agent("codex")
    root = directory or codex.watch_dir()
    if root is None or not root.is_dir():
        raise InputError("no such directory", where=str(root),
                         hint="give the Codex sessions directory as an argument")
    name = actor if actor.startswith("agent:") else f"agent:{actor}"

    def started() -> None:
        if not once:
            click.echo(f"watching {root} (every {interval:g}s; Ctrl-C to stop)", err=True)

    codex.watch(harness(), root, actor=name, backfill=backfill,
                echo=lambda line: click.echo(line), interval=interval,
                passes=1 if once else None, started=started)


@click.command("doctor")
@click.option("--agent", "agents", multiple=True, metavar="NAME",
              help=f"Only this agent ({', '.join(names())}); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def doctor(agents: tuple[str, ...], as_json: bool) -> None:
    """For each agent program the harness knows, found here: whether its model can
    write todos, whether the harness sees them, and what to set if not.

    Reads the agents' settings for this directory (nothing is changed, no agent is
    started). Claude Code 2.1.233 and later give today's models no todo tools unless
    CLAUDE_CODE_ENABLE_TODO_TOOLS=1; `harness hook claude-code install` sets it; pi has
    no todo tool until `harness hook pi install` writes its extension. Exit status 1 when
    an agent found needs something done.
    """
    from harness.agents.doctor import diagnose, render
    from harness.cli.common import emit_json

    unknown = [a for a in agents if a not in names()]
    if unknown:
        raise click.BadParameter(f"unknown agent {unknown[0]!r} (known: {', '.join(names())})",
                                 param_hint="--agent")
    findings = diagnose(Path.cwd(), list(agents) or None)
    if as_json:
        emit_json([f.as_json() for f in findings])
    else:
        click.echo(render(findings))
    _spool_note(as_json)
    if not all(f.ok for f in findings):
        raise click.exceptions.Exit(1)


def _spool_note(as_json: bool) -> None:
    """Hook calls that found the store unreachable and wait in the spool (stderr beside
    --json, which stays the list of findings)."""
    from harness.agents.spool import doctor_line

    line = doctor_line()
    if line:
        click.echo(line, err=as_json)


def register(cli: click.Group) -> None:
    cli.add_command(doctor)
    cli.add_command(mcp_cmd)
    cli.add_command(hook_group)
    cli.add_command(watch_codex)
