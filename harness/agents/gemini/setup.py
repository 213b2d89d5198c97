"""Gemini CLI's set-up: ``harness hook gemini-cli install`` and ``uninstall``, and what
``harness doctor`` finds.

The hooks go into ``.gemini/settings.json`` (project) or ``~/.gemini/settings.json`` (user;
``$GEMINI_CLI_HOME/.gemini``), with what else Gemini CLI needs in the same file: its task
tracker on (``experimental.taskTracker``: its current models have no other todo tool), or
with ``--no-task-tools`` and no ``write_todos`` for the configured model, the harness MCP
server (``harness mcp --agent gemini-cli``, serving the todo tools, writing as the hooks
do, to their session). Uninstalling removes the hooks; the tracker switch and the server
are left as they are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness.agents import install as ins
from harness.agents.claude.install import MCP_NAME, mcp_servers_change
from harness.agents.doctor import Finding, read_doc, rel
from harness.agents.seam import Installed
from harness.errors import InputError
from harness.paths import gemini_dir

AGENT = "gemini-cli"
# Gemini CLI matches a SessionStart or PreCompress matcher against the source or trigger
# exactly (no alternatives): those take none. AfterTool runs after every tool, since the
# notice rides on whichever tool's result comes next.
EVENTS: ins.Events = {
    "SessionStart": None,
    "BeforeAgent": None,
    "AfterTool": None,
    "PreCompress": None,
}
TRACKER_NOTE = ("Gemini CLI's task tracker goes on (experimental.taskTracker): its current "
                "models get task tools, whose calls the hooks copy into the store; "
                "--no-task-tools leaves it off")
INSTALL_GEMINI = "run `harness hook gemini-cli install` here"


def settings_path(scope: str, cwd: Path) -> Path:
    return (gemini_dir() if scope == "user" else cwd / ".gemini") / "settings.json"


def gemini_2(model: Any) -> bool:
    """Gemini CLI offers ``write_todos`` to Gemini 2 models only (while the tracker is
    off)."""
    return isinstance(model, str) and re.match(r"gemini-2(\.|$)", model) is not None


def gemini_trusted(cwd: Path) -> bool:
    """Whether Gemini CLI trusts ``cwd`` (``trustedFolders.json``: the longest rule that
    covers it decides; ``TRUST_PARENT`` trusts the rule's parent folder)."""
    try:
        rules = json.loads((gemini_dir() / "trustedFolders.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    best: tuple[int, str] | None = None
    for raw, level in (rules.items() if isinstance(rules, dict) else []):
        root = Path(raw).parent if level == "TRUST_PARENT" else Path(raw)
        if (root == cwd or root in cwd.parents) and (best is None
                                                      or len(str(root)) >= best[0]):
            best = (len(str(root)), str(level))
    return best is not None and best[1] in ("TRUST_FOLDER", "TRUST_PARENT")


def install(*, scope: str, cwd: Path, command: str | None, dry_run: bool,
            task_tools: bool = True) -> Installed:
    path = settings_path(scope, cwd)
    where = str(path)
    before, doc = ins.read_json(path)
    added, notes = ins.merge_hooks(doc, AGENT, EVENTS, command or ins.default_command(AGENT),
                                   where=where, named=True)
    settings: list[str] = []
    experimental = doc.get("experimental")
    if experimental is not None and not isinstance(experimental, dict):
        raise InputError("`experimental` is not an object", where=where)
    tracker_on = isinstance(experimental, dict) and experimental.get("taskTracker") is True
    if task_tools:
        if not tracker_on:
            doc.setdefault("experimental", {})["taskTracker"] = True
            settings.append("experimental.taskTracker")
            notes.append(TRACKER_NOTE)
    else:
        model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
        if tracker_on:
            notes.append("the task tracker is on in these settings already: its tools are "
                         "the model's, and the hooks follow them (no MCP server added)")
        elif gemini_2(model.get("name")):
            notes.append(f"{model['name']} has Gemini CLI's write_todos, which the hooks "
                         "follow: no MCP server added")
        else:
            settings += mcp_servers_change(doc, ins.command_argv(command, AGENT),
                                           where=where, agent=AGENT)
    if scope == "project" and not gemini_trusted(cwd):
        notes.append(f"Gemini CLI reads {path.parent.name}/settings.json only in a "
                     f"trusted folder: trust {cwd} when Gemini CLI asks (or run it with "
                     "--skip-trust, or GEMINI_CLI_TRUST_WORKSPACE=true, headless)")
    plan = ins.InstallPlan(path=path, before=before,
                           after=ins.dumped(doc, before, bool(added or settings)),
                           events=added, notes=notes, settings=settings,
                           action="added the harness hooks")
    return Installed(plans=[plan], notes=notes)


def uninstall(*, scope: str, cwd: Path) -> Installed:
    return Installed(plans=[ins.without_hooks(settings_path(scope, cwd), AGENT)], notes=[
        "experimental.taskTracker and the harness MCP server (if set) are left as they are"])


# -- doctor ---------------------------------------------------------------------------------

def doctor(project: Path, program: Path, version: str | None) -> Finding:
    f = Finding(AGENT, str(program), version)
    docs = [(p, read_doc(p)) for p in (settings_path("user", project),
                                       settings_path("project", project))]

    def setting(*keys: str) -> tuple[Path, Any] | None:
        """The strongest file's value (the project's over the user's), and the file."""
        for path, doc in reversed(docs):
            value: Any = doc
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                return path, value
        return None

    tracker, model = setting("experimental", "taskTracker"), setting("model", "name")
    servers = [p for p, doc in docs if isinstance(doc.get("mcpServers"), dict)
               and MCP_NAME in doc["mcpServers"]]
    if tracker is not None and tracker[1] is True:
        f.writes, f.how = True, f"the task tracker (experimental.taskTracker in " \
                                f"{rel(tracker[0], project)})"
    elif model is not None and gemini_2(model[1]):
        f.writes, f.how = True, f"write_todos (model.name is {model[1]} in " \
                                f"{rel(model[0], project)})"
    elif servers:
        f.writes, f.seen = True, True
        f.how = "the harness MCP server's todowrite (the task tracker is off)"
        f.seen_how = f"through the harness MCP server ({rel(servers[-1], project)})"
        return f
    else:
        f.how = ("Gemini CLI gives its current models no todo tool while the task tracker "
                 "(experimental.taskTracker) is off, and no harness MCP server is registered")
    hooked = [p for p, doc in docs if any(
        ins.is_ours(h, AGENT) for g in (doc.get("hooks") or {}).get("AfterTool") or []
        if isinstance(g, dict) for h in g.get("hooks") or [])]
    needs = [] if f.writes else ["turns the task tracker on"]
    if hooked:
        f.seen, f.seen_how = True, f"the harness hooks in {rel(hooked[-1], project)}"
    else:
        f.seen_how = "no harness hooks in Gemini CLI's settings"
        needs.append("installs the hooks")
    if needs:
        f.todo.append(f"{INSTALL_GEMINI} ({', '.join(needs)})")
    if hooked and hooked[-1].parent.parent == project and not gemini_trusted(project):
        f.seen = False
        f.seen_how += ", in a folder Gemini CLI does not trust (it ignores them until then)"
        f.todo.append("trust this folder in Gemini CLI (yes on its first start here, "
                      "--skip-trust, or GEMINI_CLI_TRUST_WORKSPACE=true headless)")
    return f
