"""Claude Code's set-up: ``harness hook claude-code install`` and ``uninstall``, and what
``harness doctor`` finds.

The hooks go into ``.claude/settings.json`` (project) or ``~/.claude/settings.json``
(user, or ``$CLAUDE_CONFIG_DIR/settings.json``), beside what else that file needs for the
model Claude Code runs today to keep its plan where the harness sees it
(:mod:`harness.agents.claude.install`: the todo-tools switch, the MCP server's
permissions), and the MCP server is registered where it is wanted. Uninstalling removes
the hooks only: the switch and the server may serve more than the harness's hooks, and
are left as they are (said so).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from harness.agents import install as ins
from harness.agents.claude import install as ci
from harness.agents.doctor import Finding, at_least, read_doc, rel
from harness.agents.seam import Installed

AGENT = "claude-code"
# event -> matcher (None: the event takes none, or we want every occurrence)
EVENTS: ins.Events = {
    "PostToolUse": "TodoWrite|TaskCreate|TaskUpdate|TaskList|TaskGet",
    "PreToolUse": "TaskList|TaskGet",
    "UserPromptSubmit": None,
    "TaskCreated": None,
    "TaskCompleted": None,
    "PreCompact": None,
    "PostCompact": None,
    "SessionStart": "startup|resume|clear|compact",
}
INSTALL_CLAUDE = "run `harness hook claude-code install` here"


def settings_path(scope: str, cwd: Path) -> Path:
    if scope == "user":
        base = os.environ.get("CLAUDE_CONFIG_DIR")
        return (Path(base).expanduser() if base else Path.home() / ".claude") / "settings.json"
    return cwd / ".claude" / "settings.json"


def hooks_plan(*, scope: str, cwd: Path, command: str | None, todo_tools: bool,
               mcp: bool) -> tuple[ins.InstallPlan, ci.SettingsChange]:
    """The settings file with the hooks, the todo-tools switch (unless not
    ``todo_tools``), and the harness MCP server's permissions where the server is wanted
    (the todo tools stay off, or ``mcp``)."""
    path = settings_path(scope, cwd)
    where = str(path)
    before, doc = ins.read_json(path)
    added, notes = ins.merge_hooks(doc, AGENT, EVENTS, command or ins.default_command(AGENT),
                                   where=where)
    claude = ci.settings_changes(doc, scope=scope, todo_tools=todo_tools, mcp=mcp,
                                 where=where)
    return ins.InstallPlan(path=path, before=before,
                           after=ins.dumped(doc, before, bool(added or claude.changes)),
                           events=added, notes=notes + claude.notes,
                           settings=claude.changes,
                           action="added the harness hooks"), claude


def mcp_plan(*, scope: str, cwd: Path, command: str | None = None) -> ins.InstallPlan:
    """The harness MCP server registered where Claude Code reads MCP servers
    (:func:`harness.agents.claude.install.mcp_config_path`)."""
    path = ci.mcp_config_path(scope, cwd)
    before, doc = ins.read_json(path)
    changes = ci.mcp_servers_change(doc, ins.command_argv(command, AGENT), where=str(path))
    return ins.InstallPlan(path=path, before=before,
                           after=ins.dumped(doc, before, bool(changes)), events=changes,
                           action="registered the harness MCP server")


def todo_tools_line(hooks: ins.InstallPlan, claude: ci.SettingsChange,
                    mcp: ins.InstallPlan | None, dry_run: bool) -> str:
    """The one line that says what was done about Claude Code's todo tools, and why."""
    server = f" (the harness MCP server, in {mcp.path})" if mcp is not None else ""
    if claude.tools_on:
        how = "would turn on" if dry_run and claude.tools == "turned on" else claude.tools
        return (f"todo tools: {how} ({ci.TODO_TOOLS_ENV}=1 in {hooks.path}), because "
                f"{ci.WHY_ON}"
                f"{'; ' + ci.MCP_TODOWRITE + ' too' + server if mcp is not None else ''}. "
                "--no-todo-tools leaves them off and registers the harness MCP server instead.")
    return (f"todo tools: left off ({claude.tools}): on today's models the model keeps its "
            f"plan with {ci.MCP_TODOWRITE}{server}, as the SessionStart hook tells it.")


def install(*, scope: str, cwd: Path, command: str | None, dry_run: bool,
            todo_tools: bool = True, mcp: bool = False) -> Installed:
    hooks, claude = hooks_plan(scope=scope, cwd=cwd, command=command, todo_tools=todo_tools,
                               mcp=mcp)
    server = mcp_plan(scope=scope, cwd=cwd, command=command) if claude.wants_mcp else None
    return Installed(plans=[hooks] + ([server] if server is not None else []),
                     notes=hooks.notes,
                     lines=[todo_tools_line(hooks, claude, server, dry_run)])


def uninstall(*, scope: str, cwd: Path) -> Installed:
    plan = ins.without_hooks(settings_path(scope, cwd), AGENT)
    return Installed(plans=[plan], notes=[
        f"{ci.TODO_TOOLS_ENV} and the harness MCP server (if set) are left as they are: "
        "remove them yourself if nothing else needs them"])


# -- doctor ---------------------------------------------------------------------------------

# The models 2.1.332 still gives its todo tools without the switch (its own list): older
# than Opus 4.8 and Sonnet 5.
_UNGATED_MODEL = re.compile(r"^claude-(3-|3-5-|3-7-|opus-4-[0-7]\b|sonnet-4-[0-6]\b|"
                            r"haiku-4-5\b)")


def claude_settings(project: Path) -> list[Path]:
    """Claude Code's settings files, weakest first (user, project, project local)."""
    return [settings_path("user", project), project / ".claude" / "settings.json",
            project / ".claude" / "settings.local.json"]


def doctor(project: Path, program: Path, version: str | None) -> Finding:
    f = Finding(AGENT, str(program), version)
    docs: list[tuple[Path, dict[str, Any]]] = [(p, read_doc(p)) for p in claude_settings(project)]
    switch, where = os.environ.get(ci.TODO_TOOLS_ENV), "the environment"
    model = os.environ.get("ANTHROPIC_MODEL")
    if switch is None:
        for path, doc in reversed(docs):
            env = doc.get("env") if isinstance(doc.get("env"), dict) else {}
            if ci.TODO_TOOLS_ENV in env:
                switch, where = str(env[ci.TODO_TOOLS_ENV]), rel(path, project)
                break
    for _, doc in reversed(docs):
        if model is None and isinstance(doc.get("model"), str):
            model = doc["model"]
    gated = at_least(version, ci.GATED_SINCE) and not (
        model is not None and _UNGATED_MODEL.match(model))
    hooked = [p for p, doc in docs if any(
        ins.is_ours(h, AGENT) for g in (doc.get("hooks") or {}).get("PostToolUse") or []
        if isinstance(g, dict) for h in g.get("hooks") or [])]
    server = ci.registered(project)
    if not gated:
        f.writes, f.how = True, "its todo tools (TaskCreate, TodoWrite): " + (
            f"model {model} has them" if model else f"Claude Code {version} gates none")
    elif ci.switch_on(switch):
        f.writes, f.how = True, f"its todo tools ({ci.TODO_TOOLS_ENV}={switch} in {where})"
    elif server is not None:
        # Its own tools are off; the plan goes through the MCP server, seen as written.
        f.writes, f.seen = True, True
        f.how = f"{ci.MCP_TODOWRITE} only (its own todo tools are off: no " \
                f"{ci.TODO_TOOLS_ENV}=1)"
        f.seen_how = f"through the harness MCP server ({rel(server, project)})"
        f.todo.append(f"for its own todo tools: {INSTALL_CLAUDE} (sets {ci.TODO_TOOLS_ENV}=1)")
        return f
    else:
        f.how = (f"Claude Code {version or '?'} gives today's models no todo tools "
                 f"without {ci.TODO_TOOLS_ENV}=1, and no harness MCP server is registered")
        f.seen_how = "nothing to see"
        f.todo.append(f"{INSTALL_CLAUDE} (sets {ci.TODO_TOOLS_ENV}=1 in "
                      ".claude/settings.json's env, installs the hooks, registers the MCP "
                      "server)")
        return f
    if hooked:
        f.seen, f.seen_how = True, f"the harness hooks in {rel(hooked[-1], project)}"
    else:
        f.seen_how = "no harness hooks in Claude Code's settings"
        f.todo.append(f"{INSTALL_CLAUDE} (installs the hooks)")
    return f
