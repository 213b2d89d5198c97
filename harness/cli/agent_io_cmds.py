"""Agents using the harness directly: `harness mcp`, `harness hook
claude-code|codex|gemini-cli|opencode` (and their `install`), `harness watch-codex`.

The MCP SDK is imported only when `harness mcp` runs; the hooks themselves run through
:mod:`harness.cli.hot` (no click at all) on every todo call of an agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from harness.cli import hot
from harness.cli.common import common_options, harness
from harness.errors import InputError
from harness.paths import codex_home

if TYPE_CHECKING:
    from harness.agents.install import InstallPlan


@click.command("mcp")
@click.option("--actor", metavar="NAME",
              help="Record writes as agent:NAME instead of the client's own name (the "
                   "clientInfo.name of its MCP handshake).")
@click.option("--tools", metavar="A,B,C",
              help="Serve only these tools (their schemas cost the agent's context; see "
                   "docs/PERFORMANCE.md). Default: all.")
@click.option("--agent", type=click.Choice(["claude-code", "codex", "gemini-cli"]),
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
    from harness.agents.claude.hooks import project_dir
    from harness.agents.claude.hooks import session_for as claude_session
    from harness.agents.claude.install import MCP_INSTRUCTIONS
    from harness.agents.codex.hooks import session_for as codex_session
    from harness.agents.mcp_server import INSTRUCTIONS
    from harness.context import Harness

    meta = click.get_current_context().find_root().meta
    payload = {"cwd": str(Path.cwd())}  # what a hook payload says of the project
    pick = claude_session if agent == "claude-code" else codex_session
    serve(Harness(meta.get("harness.db"), pick(payload, meta.get("harness.session")),
                  announce=False, cwd=project_dir(payload)),
          actor=actor or agent, tools=chosen,
          instructions=INSTRUCTIONS + (MCP_INSTRUCTIONS if agent == "claude-code" else ""))


@click.group("hook")
def hook_group() -> None:
    """Hooks for agents that keep their own todo list: they copy it into the store, mark
    where the agent's context was cut, and give the list back after each cut.

    A hook never stands in the agent's way: on any error it logs to the data directory's
    logs/hooks.log and exits 0. `harness hook AGENT install` writes the hooks into the
    agent's settings.
    """


@hook_group.group("claude-code", invoke_without_command=True)
@click.option("--actor", metavar="NAME", default="claude-code", show_default=True,
              help="Record writes as agent:NAME.")
@common_options
@click.pass_context
def hook_claude_code(ctx: click.Context, actor: str) -> None:
    """A Claude Code hook: give it the hook's JSON payload on stdin.

    \b
    PostToolUse TodoWrite           the whole list is merged into the session
    PostToolUse TaskCreate/Update   one item is created, changed or deleted
    TaskCreated, TaskCompleted      one item is created / completed
    PreCompact, PostCompact         the compaction is recorded in the history
    SessionStart                    the start (startup, resume, clear, compact) is
                                    recorded, and the list is printed as
                                    additionalContext: it comes back after every cut

    The session: --session, else CLAUDE_CODE_TASK_LIST_ID, else HARNESS_SESSION, else
    the project directory (its own store's current session, or one named after it).
    `harness hook claude-code install` writes these hooks into .claude/settings.json.
    """
    if ctx.invoked_subcommand is None:
        _run_hook("claude-code", actor)


@hook_group.group("codex", invoke_without_command=True)
@click.option("--actor", metavar="NAME", default="codex", show_default=True,
              help="Record writes as agent:NAME.")
@common_options
@click.pass_context
def hook_codex(ctx: click.Context, actor: str) -> None:
    """A Codex CLI hook (.codex/hooks.json): the hook's JSON payload on stdin.

    \b
    SessionStart                    recorded; the plan is printed as additionalContext
                                    (Codex sends source=compact after every compaction)
    PreCompact, PostCompact         the compaction is recorded in the history
    PostToolUse update_plan         the plan is merged (as watch-codex would)

    `harness hook codex install` writes these hooks into .codex/hooks.json.
    """
    if ctx.invoked_subcommand is None:
        _run_hook("codex", actor)


@hook_group.group("gemini-cli", invoke_without_command=True)
@click.option("--actor", metavar="NAME", default="gemini-cli", show_default=True,
              help="Record writes as agent:NAME.")
@common_options
@click.pass_context
def hook_gemini_cli(ctx: click.Context, actor: str) -> None:
    """A Gemini CLI hook (settings.json `hooks`): the hook's JSON payload on stdin.

    \b
    SessionStart                    recorded; the list is printed as additionalContext
    AfterTool write_todos           the whole list is merged (Gemini 2 models)
    AfterTool tracker_*             one task is created, changed or linked (the task
                                    tracker, with experimental.taskTracker)
    AfterTool (any), BeforeAgent    what others changed since Gemini last saw the list,
                                    or the whole list when a compression is due
    PreCompress                     a compression is recorded in the history

    `harness hook gemini-cli install` writes these hooks into .gemini/settings.json.
    """
    if ctx.invoked_subcommand is None:
        _run_hook("gemini-cli", actor)


@hook_group.group("copilot", invoke_without_command=True)
@click.option("--event", type=click.Choice(["sessionStart", "userPromptSubmitted",
                                            "postToolUse", "preCompact", "sessionEnd"]),
              help="The hook's event (Copilot CLI's payloads do not say it).")
@click.option("--actor", metavar="NAME", default="copilot", show_default=True,
              help="Record writes as agent:NAME.")
@common_options
@click.pass_context
def hook_copilot(ctx: click.Context, event: str | None, actor: str) -> None:
    """A GitHub Copilot CLI hook: the hook's JSON payload on stdin, its event as --event.

    \b
    sessionStart                    recorded; the list is printed as additionalContext
    postToolUse sql                 the session's todos table (and todo_deps) is merged,
                                    when the query touched it
    postToolUse, userPromptSubmitted  what others changed since Copilot last saw the
                                    list, or the whole list after a compaction
    preCompact                      the compaction is recorded in the history

    `harness hook copilot install` writes these hooks into .github/hooks/.
    """
    if ctx.invoked_subcommand is None:
        _run_hook("copilot", actor, event)


@hook_group.command("opencode")
@click.option("--actor", metavar="NAME", default="opencode", show_default=True,
              help="Record writes as agent:NAME.")
@common_options
def hook_opencode(actor: str) -> None:
    """An opencode `todo.updated` event on stdin (the event, or its properties
    {sessionID, todos}); the list is merged into the session. See
    examples/opencode-plugin/ for the plugin that calls this (and puts the list into
    opencode's compaction)."""
    _run_hook("opencode", actor)


def _run_hook(agent: str, actor: str, event: str | None = None) -> None:
    """The hook's body, as the fast route runs it (:func:`harness.cli.hot.hook`), with the
    global --db and --session click read."""
    meta = click.get_current_context().find_root().meta
    hot.hook(agent, db=meta.get("harness.db"), session=meta.get("harness.session"),
             actor=actor, event=event)


def _install_options(fn):  # type: ignore[no-untyped-def]
    fn = click.option("--dry-run", is_flag=True,
                      help="Show the change as a diff; write nothing.")(fn)
    fn = click.option("--user", "scope", flag_value="user",
                      help="The user's settings (~/...), for every project.")(fn)
    fn = click.option("--project", "scope", flag_value="project", default=True,
                      help="This project's settings (the default).")(fn)
    fn = click.option("--command", "command", metavar="CMD",
                      help="The command the hooks run (default: this harness, as "
                           "`harness hook AGENT`).")(fn)
    return fn


def _install(agent: str, scope: str, dry_run: bool, command: str | None,
             codex: str | None = None, todo_tools: bool = True, mcp: bool = False) -> None:
    from harness.agents.install import (
        claude_mcp,
        codex_config,
        copilot_install,
        gemini_settings,
        install,
    )

    cwd = Path.cwd()
    if agent == "copilot":
        hooks = copilot_install(scope=scope, cwd=cwd, command=command)
    else:
        hooks = install(agent, scope=scope, cwd=cwd, command=command, todo_tools=todo_tools,
                        mcp=mcp)
    if agent == "gemini-cli":
        hooks = gemini_settings(hooks, scope=scope, cwd=cwd, command=command,
                                task_tools=todo_tools)
    plans = [hooks]
    if agent == "codex":
        plans.append(codex_config(hooks, scope=scope, cwd=cwd, codex=codex))
    elif hooks.claude is not None and hooks.claude.wants_mcp:
        plans.append(claude_mcp(scope=scope, cwd=cwd, command=command))
    for plan in plans:
        if dry_run:
            click.echo(plan.diff or f"{plan.path}: already up to date (nothing to change)")
        elif not plan.changed:
            click.echo(f"{plan.path}: already up to date")
        else:
            plan.write()
            done = []
            if plan.events:
                done.append(f"{plan.action} ({', '.join(plan.events)})")
            if plan.settings:
                done.append(f"set {', '.join(plan.settings)}")
            click.echo(f"{plan.path}: {'; '.join(done)}")
    for line in hooks.notes:
        click.echo(f"note: {line}")
    if agent == "claude-code":
        click.echo(_todo_tools_line(hooks, plans[1] if len(plans) > 1 else None, dry_run))
    for plan in plans[1:]:  # what install could not do for the person
        for line in plan.notes:
            click.echo(f"{'still to do' if not dry_run else 'then still to do'}: {line}")


def _todo_tools_line(hooks: InstallPlan, mcp: InstallPlan | None, dry_run: bool) -> str:
    """The one line that says what was done about Claude Code's todo tools, and why."""
    from harness.agents.claude.install import MCP_TODOWRITE, TODO_TOOLS_ENV, WHY_ON

    claude = hooks.claude
    assert claude is not None
    server = f" (the harness MCP server, in {mcp.path})" if mcp is not None else ""
    if claude.tools_on:
        how = "would turn on" if dry_run and claude.tools == "turned on" else claude.tools
        return (f"todo tools: {how} ({TODO_TOOLS_ENV}=1 in {hooks.path}), because {WHY_ON}"
                f"{'; ' + MCP_TODOWRITE + ' too' + server if mcp is not None else ''}. "
                "--no-todo-tools leaves them off and registers the harness MCP server instead.")
    return (f"todo tools: left off ({claude.tools}): on today's models the model keeps its "
            f"plan with {MCP_TODOWRITE}{server}, as the SessionStart hook tells it.")


@hook_claude_code.command("install")
@_install_options
@click.option("--no-todo-tools", "todo_tools", flag_value=False, default=True,
              help="Leave Claude Code's todo tools as they are (off on today's models): "
                   "the model then keeps its plan through the harness MCP server, which is "
                   "registered.")
@click.option("--mcp", is_flag=True,
              help="Register the harness MCP server even with the todo tools on.")
def install_claude_code(scope: str, dry_run: bool, command: str | None,
                        todo_tools: bool, mcp: bool) -> None:
    """Merge the harness hooks into .claude/settings.json (--project, the default) or
    ~/.claude/settings.json (--user), and let the model write todos there.

    \b
    In the same file: env CLAUDE_CODE_ENABLE_TODO_TOOLS=1 (Claude Code 2.1.233 and
    later give today's models no todo tools without it; --no-todo-tools leaves it off),
    the harness MCP server's todowrite and todoread allowed, and (--project) the
    server enabled. The server itself is registered as `harness mcp --agent
    claude-code` in .mcp.json (--project) or the user's .claude.json (--user).
    Other hooks and settings are kept; running it again changes nothing; --dry-run
    shows the diff."""
    _install("claude-code", scope, dry_run, command, todo_tools=todo_tools, mcp=mcp)


@hook_codex.command("install")
@_install_options
@click.option("--codex", "codex", metavar="PATH",
              help="The Codex program that hashes the hooks for trust (default: codex on "
                   "PATH, or $HARNESS_CODEX_BIN).")
def install_codex(scope: str, dry_run: bool, command: str | None, codex: str | None) -> None:
    """Merge the harness hooks into .codex/hooks.json (--project, the default) or
    $CODEX_HOME/hooks.json (--user, default ~/.codex), and set in $CODEX_HOME/config.toml
    what Codex needs to run them: `[tools.update_plan] enabled = true`, and the hooks
    trusted (their hash asked of Codex itself). Other hooks and settings are kept; running
    it again changes nothing. Prints what is left to you, such as trusting the project."""
    _install("codex", scope, dry_run, command, codex)


@hook_gemini_cli.command("install")
@_install_options
@click.option("--no-task-tools", "task_tools", flag_value=False, default=True,
              help="Leave Gemini CLI's task tracker off (experimental.taskTracker); a model "
                   "without write_todos then gets the harness MCP server instead.")
def install_gemini_cli(scope: str, dry_run: bool, command: str | None,
                       task_tools: bool) -> None:
    """Merge the harness hooks into .gemini/settings.json (--project, the default) or
    ~/.gemini/settings.json (--user; $GEMINI_CLI_HOME/.gemini), and turn on Gemini CLI's
    task tracker (experimental.taskTracker), which gives its current models task tools:
    Gemini 3 models have no todo tool otherwise. Other hooks and settings are kept;
    running it again changes nothing. Prints what it turned on, and what is left to you,
    such as trusting the folder."""
    _install("gemini-cli", scope, dry_run, command, todo_tools=task_tools)


@hook_copilot.command("install")
@_install_options
def install_copilot(scope: str, dry_run: bool, command: str | None) -> None:
    """Write the harness hooks for GitHub Copilot CLI: .github/hooks/todo-harness.json
    (--project, the default; a file of its own) or `hooks` in $COPILOT_HOME/settings.json
    (--user, default ~/.copilot). Copilot CLI's model keeps its plan in its session's todos
    table (the sql tool), which the hooks read after each change. Running it again
    changes nothing."""
    _install("copilot", scope, dry_run, command)


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
    from harness.agents.codex.watch import CodexWatcher

    root = directory or codex_home() / "sessions"
    if not root.is_dir():
        raise InputError("no such directory", where=str(root),
                         hint="give the Codex sessions directory as an argument")
    name = actor if actor.startswith("agent:") else f"agent:{actor}"
    watcher = CodexWatcher(harness(), root, actor=name, backfill=backfill,
                           echo=lambda line: click.echo(line))
    if not once:
        click.echo(f"watching {root} (every {interval:g}s; Ctrl-C to stop)", err=True)
    watcher.run(interval, passes=1 if once else None)


@click.command("doctor")
@click.option("--agent", "agents", multiple=True, metavar="NAME",
              help="Only this agent (claude-code, codex, opencode, gemini-cli, copilot); "
                   "repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
def doctor(agents: tuple[str, ...], as_json: bool) -> None:
    """For each agent program found here (Claude Code, Codex, opencode, Gemini CLI,
    GitHub Copilot CLI):
    whether its model can write todos, whether the harness sees them, and what to set if
    not.

    Reads the agents' settings for this directory (nothing is changed, no agent is
    started). Claude Code 2.1.233 and later give today's models no todo tools unless
    CLAUDE_CODE_ENABLE_TODO_TOOLS=1; `harness hook claude-code install` sets it. Exit
    status 1 when an agent found needs something done.
    """
    from harness.agents.doctor import CHECKS, diagnose, render
    from harness.cli.common import emit_json

    unknown = [a for a in agents if a not in CHECKS]
    if unknown:
        raise click.BadParameter(f"unknown agent {unknown[0]!r} (known: {', '.join(CHECKS)})",
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
