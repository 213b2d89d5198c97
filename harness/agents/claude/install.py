"""What ``harness hook claude-code install`` sets beside the hooks, so that the model
Claude Code runs today can keep its plan where the harness sees it.

Claude Code 2.1.233 and later offer their todo tools (``TodoWrite``, ``TaskCreate``,
``TaskUpdate``, ``TaskList``, ``TaskGet``) to the models people use today (Opus 4.8,
Sonnet 5 and newer: its default model since) only with ``CLAUDE_CODE_ENABLE_TODO_TOOLS=1``;
without it the model has no todo tool, and the hooks have nothing to copy. So, in the
settings file the hooks go into, ``env.CLAUDE_CODE_ENABLE_TODO_TOOLS = "1"`` (Claude Code
puts a settings file's ``env`` into its own environment, and its hooks'), unless
``--no-todo-tools``. A value the user set is left as it is.

When the todo tools stay off (``--no-todo-tools``, or the user's own ``0``), or with
``--mcp``, the model keeps its plan through the harness MCP server instead:

* the server is registered (:func:`mcp_servers_change`) in the project's ``.mcp.json``
  (``--project``) or the user's ``.claude.json`` (``--user``; in ``$CLAUDE_CONFIG_DIR``
  when set, else the home directory), as ``harness mcp --agent claude-code --tools
  todowrite,todoread,todo_update``: it writes as ``agent:claude-code`` to the session the
  hooks use, and serves only the todo tools (each served tool costs context on a Claude
  Code that loads them up front: docs/PERFORMANCE.md);
* ``permissions.allow`` gains those three tools, which only touch the todo list (Claude
  Code asks before any MCP tool; for its own todo tools it never asks). Claude Code reads
  a project's ``permissions`` once the workspace is trusted (its trust dialog);
* ``enabledMcpjsonServers`` gains ``harness`` (project scope): the server is then started
  without a question;
* the ``SessionStart`` hook tells the model to use ``mcp__harness__todowrite``, and how to
  load it through ``ToolSearch`` when Claude Code defers it (:func:`mcp_hint`).

With the todo tools on, the server is not registered: on 2.1.197 its tools would cost
every request their schemas, for a list the hooks already keep.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import InputError

TODO_TOOLS_ENV = "CLAUDE_CODE_ENABLE_TODO_TOOLS"
MCP_NAME = "harness"
MCP_TODOWRITE = f"mcp__{MCP_NAME}__todowrite"
# Its todo tools: they touch only the todo list, as Claude Code's own (which it never
# asks for); the pipeline tools still ask.
MCP_TOOLS = ("todowrite", "todoread", "todo_update")
MCP_ALLOWED = tuple(f"mcp__{MCP_NAME}__{t}" for t in MCP_TOOLS)
# The first release whose todo tools are off on today's models unless switched on (its
# changelog, anthropics/claude-code#80487).
GATED_SINCE = (2, 1, 233)
WHY_ON = ("Claude Code 2.1.233 and later give today's models (Opus 4.8, Sonnet 5 and "
          "newer) no todo tools without it, and then nothing reaches the store")


@dataclass
class SettingsChange:
    changes: list[str]  # what was set, as the installer says it
    notes: list[str]
    tools: str  # the todo tools now: "turned on", "already on", or why they stay off
    wants_mcp: bool  # the harness MCP server is to be registered

    @property
    def tools_on(self) -> bool:
        return self.tools in ("turned on", "already on")


def settings_changes(doc: dict[str, Any], *, scope: str, todo_tools: bool, mcp: bool,
                     where: str) -> SettingsChange:
    """Set in Claude Code's settings ``doc`` (in place) what the module doc lists."""
    changes: list[str] = []
    notes: list[str] = []
    had = set(doc)  # what the user's file had: kept even when empty
    perms_had = isinstance(doc.get("permissions"), dict) and "allow" in doc["permissions"]
    env = _part(doc, "env", dict, where)
    have = env.get(TODO_TOOLS_ENV)
    if have is not None and not switch_on(str(have)):
        tools = f"{TODO_TOOLS_ENV} is {have!r} there"  # the user's word: kept
    elif have is not None:
        tools = "already on"
        if not todo_tools:
            notes.append(f"--no-todo-tools: {TODO_TOOLS_ENV} is already set in {where}; "
                         "remove it there to turn the todo tools off")
    elif todo_tools:
        env[TODO_TOOLS_ENV] = "1"
        changes.append(f"env.{TODO_TOOLS_ENV}=1")
        tools = "turned on"
    else:
        tools = "--no-todo-tools"
    wants_mcp = mcp or tools not in ("turned on", "already on")
    allow = _part(_part(doc, "permissions", dict, where), "allow", list,
                  where, "permissions.allow")
    for tool in MCP_ALLOWED if wants_mcp else ():
        if tool not in allow and f"mcp__{MCP_NAME}" not in allow:
            allow.append(tool)
            changes.append(f"permissions.allow {tool}")
    if wants_mcp and scope == "project" and doc.get("enableAllProjectMcpServers") is not True:
        enabled = _part(doc, "enabledMcpjsonServers", list, where)
        if MCP_NAME not in enabled:
            enabled.append(MCP_NAME)
            changes.append(f"enabledMcpjsonServers {MCP_NAME}")
    if not perms_had and not doc["permissions"]["allow"]:
        del doc["permissions"]["allow"]
    for key in ("env", "permissions", "enabledMcpjsonServers"):
        if key not in had and doc.get(key) in ({}, []):
            del doc[key]  # made for nothing: the file stays as it was
    return SettingsChange(changes, notes, tools, wants_mcp)


def _part(doc: dict[str, Any], key: str, kind: type, where: str,
          name: str | None = None) -> Any:
    """``doc[key]``, made empty when missing."""
    value = doc.setdefault(key, kind())
    if not isinstance(value, kind):
        raise InputError(f"`{name or key}` is not {'an object' if kind is dict else 'a list'}",
                         where=where)
    return value


def mcp_config_path(scope: str, cwd: Path) -> Path:
    """Where Claude Code reads MCP servers: the project's ``.mcp.json``, or the user's
    ``.claude.json`` (its top-level ``mcpServers``)."""
    if scope == "user":
        base = os.environ.get("CLAUDE_CONFIG_DIR")
        return (Path(base).expanduser() if base else Path.home()) / ".claude.json"
    return cwd / ".mcp.json"


def mcp_server_entry(argv: list[str], agent: str = "claude-code") -> dict[str, Any]:
    """The server as Claude Code (or another ``agent`` that reads the same
    ``mcpServers`` shape, as Gemini CLI does) starts it: this harness, ``mcp --agent
    AGENT``, serving the todo tools."""
    return {"type": "stdio", "command": argv[0],
            "args": [*argv[1:], "mcp", "--agent", agent, "--tools", ",".join(MCP_TOOLS)],
            "env": {}}


def mcp_servers_change(doc: dict[str, Any], argv: list[str], *,
                       where: str, agent: str = "claude-code") -> list[str]:
    """Register the server in an MCP config ``doc`` (in place): the change made, if any.
    A ``harness`` server already there is left as it is (the user's, or an earlier
    install's)."""
    servers = doc.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InputError("`mcpServers` is not an object", where=where)
    if MCP_NAME in servers:
        return []
    servers[MCP_NAME] = mcp_server_entry(argv, agent)
    return [f"mcpServers.{MCP_NAME}"]


# What the server tells Claude Code's model beside its general instructions: one list,
# kept one way (two ways would be two whole-list writers undoing each other).
MCP_INSTRUCTIONS = (" In Claude Code: when you have TaskCreate or TodoWrite, keep your plan "
                    "with those (the harness copies them through its hooks), and use todowrite "
                    "only when you have neither.")


def switch_on(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def registered(project: Path | None) -> Path | None:
    """Where Claude Code finds the harness MCP server (the project's ``.mcp.json``, or the
    user's ``.claude.json``); None: nowhere."""
    paths = [mcp_config_path("user", Path.home())]
    if project is not None:
        paths.insert(0, mcp_config_path("project", project))
    for path in paths:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        servers = doc.get("mcpServers") if isinstance(doc, dict) else None
        if isinstance(servers, Mapping) and MCP_NAME in servers:
            return path
    return None


def mcp_hint(env: Mapping[str, str], project: Path | None) -> str | None:
    """What the ``SessionStart`` answer tells the model when its todo tools may be off:
    keep the plan with the harness MCP server, found through ``ToolSearch`` when Claude
    Code defers it. None: the switch is on, or no harness server is registered."""
    if switch_on(env.get(TODO_TOOLS_ENV)) or registered(project) is None:
        return None
    return (f"todo-harness keeps this project's plan. If you have no TaskCreate or TodoWrite "
            f"tool, keep your plan with {MCP_TODOWRITE} (the whole list, each item "
            "{content, status, priority}) whenever it changes. When it is listed as a "
            "deferred tool, load it first: ToolSearch with query "
            f"\"select:{MCP_TODOWRITE}\".")
