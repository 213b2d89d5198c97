"""``harness hook claude-code|codex|gemini-cli install``: merge the harness's hooks into
the agent's own hook settings.

Claude Code reads ``.claude/settings.json`` (project) and ``~/.claude/settings.json``
(user, or ``$CLAUDE_CONFIG_DIR/settings.json``); Codex reads ``.codex/hooks.json`` and
``$CODEX_HOME/hooks.json`` (default ``~/.codex``); Gemini CLI reads ``.gemini/settings.json``
and ``~/.gemini/settings.json`` (``$GEMINI_CLI_HOME/.gemini``). All keep hooks as
``{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type": "command", "command": ...}]}]}}``.

The merge keeps everything else in the file, in its order. An event that already has a
command hook running ``harness hook AGENT`` (however it is spelt: a path, a
``HARNESS_SESSION=...`` prefix) is left as it is; the others get a group of their own
appended. So installing twice changes nothing, and an older install gains the events it
lacks. The file is written whole, beside itself and renamed into place.

For Claude Code the same settings file also turns its todo tools on and lets the harness
MCP server's todo tools run, and the server is registered (:mod:`harness.agents.claude.install`).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import InputError, UsageError
from harness.paths import codex_home, copilot_home, gemini_dir

if TYPE_CHECKING:
    from harness.agents.claude.install import SettingsChange

# event -> matcher (None: the event takes none, or we want every occurrence)
CLAUDE_EVENTS: dict[str, str | None] = {
    "PostToolUse": "TodoWrite|TaskCreate|TaskUpdate|TaskList|TaskGet",
    "PreToolUse": "TaskList|TaskGet",
    "UserPromptSubmit": None,
    "TaskCreated": None,
    "TaskCompleted": None,
    "PreCompact": None,
    "PostCompact": None,
    "SessionStart": "startup|resume|clear|compact",
}
CODEX_EVENTS: dict[str, str | None] = {
    "SessionStart": "startup|resume|clear|compact",
    "PreCompact": None,
    "PostCompact": None,
    "PostToolUse": "update_plan",
    "UserPromptSubmit": None,  # carries a person's change since Codex last saw the list
}
# Gemini CLI matches a SessionStart or PreCompress matcher against the source or trigger
# exactly (no alternatives): those take none. AfterTool runs after every tool, since the
# notice rides on whichever tool's result comes next.
GEMINI_EVENTS: dict[str, str | None] = {
    "SessionStart": None,
    "BeforeAgent": None,
    "AfterTool": None,
    "PreCompress": None,
}
AGENTS = {"claude-code": CLAUDE_EVENTS, "codex": CODEX_EVENTS, "gemini-cli": GEMINI_EVENTS}


@dataclass
class InstallPlan:
    path: Path
    before: str | None  # the file as it is (None: it does not exist)
    after: str
    events: list[str]  # the events that gain a harness hook
    notes: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)  # other settings set
    action: str = "set"  # what gaining ``events`` is called
    claude: SettingsChange | None = None  # Claude Code: its todo tools, the MCP server

    @property
    def changed(self) -> bool:
        return bool(self.events or self.settings)

    @property
    def diff(self) -> str:
        if not self.changed:
            return ""
        old = (self.before or "").splitlines(keepends=True)
        new = self.after.splitlines(keepends=True)
        name = str(self.path)
        return "".join(difflib.unified_diff(old, new, fromfile=name if self.before is not None
                                            else "/dev/null", tofile=name))

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.after)
            if self.path.exists():
                os.chmod(tmp, self.path.stat().st_mode & 0o777)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def settings_path(agent: str, scope: str, cwd: Path) -> Path:
    if agent == "claude-code":
        if scope == "user":
            base = os.environ.get("CLAUDE_CONFIG_DIR")
            return (Path(base).expanduser() if base else Path.home() / ".claude") \
                / "settings.json"
        return cwd / ".claude" / "settings.json"
    if agent == "gemini-cli":
        return (gemini_dir() if scope == "user" else cwd / ".gemini") / "settings.json"
    if scope == "user":
        return codex_home() / "hooks.json"
    return cwd / ".codex" / "hooks.json"


def harness_argv() -> list[str]:
    """How an agent should run this harness: ``harness`` when that is the one on PATH,
    else this harness by its full path (a virtualenv the agent's shell does not see)."""
    here = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    found = shutil.which("harness")
    if found and here is not None and Path(found).resolve() == here:
        return ["harness"]
    if here is not None and here.name == "harness" and here.is_file():
        return [str(here)]
    return [sys.executable, "-m", "harness"]


def default_command(agent: str) -> str:
    return shlex.join([*harness_argv(), "hook", agent])


def command_argv(command: str | None, agent: str) -> list[str]:
    """This harness as the hooks' ``command`` runs it (``--command``'s words before
    ``hook AGENT``; a shell prefix such as ``VAR=x`` is dropped), else :func:`harness_argv`."""
    if command:
        try:
            words = shlex.split(command)
        except ValueError:
            words = []
        if words[-2:] == ["hook", agent]:
            words = [w for w in words[:-2] if not re.match(r"^\w+=", w)]
            if words:
                return words
    return harness_argv()


def is_ours(hook: Any, agent: str) -> bool:
    """A command hook that runs ``harness hook AGENT`` (Copilot CLI names the command
    ``bash``)."""
    line = hook.get("command", hook.get("bash")) if isinstance(hook, dict) else None
    return (isinstance(line, str)
            and re.search(rf"\bhook\s+{re.escape(agent)}\b", line) is not None)


def _narrow_matchers(hooks: dict[str, Any], agent: str) -> list[str]:
    """What an older install of ours misses inside an event it already hooks (a
    matcher without tools added since); said, not rewritten, since the user may have
    narrowed it on purpose."""
    notes = []
    for event, matcher in AGENTS[agent].items():
        if not matcher:
            continue
        for group in hooks.get(event) or []:
            if not (isinstance(group, dict) and isinstance(group.get("hooks"), list)
                    and any(is_ours(h, agent) for h in group["hooks"])):
                continue
            have = str(group.get("matcher") or "")
            missing = [t for t in matcher.split("|") if have and have != "*"
                       and t not in have.split("|")]
            if missing:
                notes.append(f"the harness's {event} hook matches {have!r}, not "
                             f"{', '.join(missing)}: set its matcher to {matcher!r} for them")
    return notes


def read_json(path: Path) -> tuple[str | None, dict[str, Any]]:
    """A JSON settings file: its text (None: it does not exist) and its object."""
    where = str(path)
    try:
        before: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read ({getattr(exc, 'strerror', None) or exc})",
                         where=where) from None
    doc: Any = {}
    if before is not None and before.strip():
        try:
            doc = json.loads(before)
        except ValueError as exc:
            raise InputError(f"not valid JSON ({exc}); fix it, then install again",
                             where=where) from None
    if not isinstance(doc, dict):
        raise InputError(f"the settings are a {type(doc).__name__}, not a JSON object",
                         where=where)
    return before, doc


def _dumped(doc: dict[str, Any], before: str | None, changed: bool) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n" if changed else (before or "")


def install(agent: str, *, scope: str = "project", cwd: Path, command: str | None = None,
            path: Path | None = None, todo_tools: bool = True,
            mcp: bool = False) -> InstallPlan:
    """What installing the hooks would make of the settings file (write it with
    :meth:`InstallPlan.write`); for Claude Code also its todo-tools switch (unless not
    ``todo_tools``), and the harness MCP server's permissions where the server is wanted
    (``plan.claude.wants_mcp``: the todo tools stay off, or ``mcp``)."""
    if agent not in AGENTS:
        raise UsageError(f"unknown agent {agent!r} (expected {', '.join(AGENTS)})")
    path = path or settings_path(agent, scope, cwd)
    where = str(path)
    before, doc = read_json(path)
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InputError("`hooks` is not an object", where=where)
    cmd = command or default_command(agent)
    added = []
    for event, matcher in AGENTS[agent].items():
        groups = hooks.get(event)
        if groups is None:
            groups = hooks[event] = []
        if not isinstance(groups, list):
            raise InputError(f"`hooks.{event}` is not a list", where=where)
        if any(isinstance(g, dict) and isinstance(g.get("hooks"), list)
               and any(is_ours(h, agent) for h in g["hooks"]) for g in groups):
            continue
        group: dict[str, Any] = {"matcher": matcher} if matcher else {}
        hook: dict[str, Any] = {"type": "command", "command": cmd}
        if agent == "gemini-cli":
            hook = {"name": "todo-harness", **hook}  # how Gemini CLI names it to the user
        group["hooks"] = [hook]
        groups.append(group)
        added.append(event)
    notes = _narrow_matchers(hooks, agent)
    claude = None
    if agent == "claude-code":
        from harness.agents.claude.install import settings_changes

        claude = settings_changes(doc, scope=scope, todo_tools=todo_tools, mcp=mcp,
                                  where=where)
        notes += claude.notes
    settings = claude.changes if claude is not None else []
    return InstallPlan(path=path, before=before,
                       after=_dumped(doc, before, bool(added or settings)), events=added,
                       notes=notes, settings=settings, action="added the harness hooks",
                       claude=claude)


def claude_mcp(*, scope: str, cwd: Path, command: str | None = None) -> InstallPlan:
    """The harness MCP server registered where Claude Code reads MCP servers
    (:func:`harness.agents.claude.install.mcp_config_path`)."""
    from harness.agents.claude.install import mcp_config_path, mcp_servers_change

    path = mcp_config_path(scope, cwd)
    before, doc = read_json(path)
    changes = mcp_servers_change(doc, command_argv(command, "claude-code"), where=str(path))
    return InstallPlan(path=path, before=before, after=_dumped(doc, before, bool(changes)),
                       events=changes, action="registered the harness MCP server")


def ours_keys(hooks_text: str, agent: str) -> set[str]:
    """Codex's relative keys (``post_tool_use:0:0``) of our hooks in a hooks file."""
    doc = json.loads(hooks_text) if hooks_text.strip() else {}
    keys = set()
    for event, groups in (doc.get("hooks") or {}).items():
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()
        for gi, group in enumerate(groups if isinstance(groups, list) else []):
            hooks = group.get("hooks") if isinstance(group, dict) else None
            for hi, hook in enumerate(hooks if isinstance(hooks, list) else []):
                if is_ours(hook, agent):
                    keys.add(f"{snake}:{gi}:{hi}")
    return keys


def codex_config(hooks: InstallPlan, *, scope: str, cwd: Path,
                 codex: str | None = None) -> InstallPlan:
    """What Codex's ``config.toml`` needs for the hooks in ``hooks.after`` to run: the
    ``update_plan`` tool enabled, and our hooks trusted (their hash asked of Codex; see
    :mod:`harness.agents.codex.config`). What install cannot do is in the notes."""
    from harness.agents.codex import config as cc

    path = cc.config_path()
    where = str(path)
    before, doc = cc.read(path)
    text = before or ""
    changes = []
    notes = []
    if cc.lookup(doc, ["tools", "update_plan", "enabled"]) is not True:
        text = cc.set_value(text, ["tools", "update_plan"], "enabled", True, where=where)
        changes.append("tools.update_plan.enabled")
    program = cc.find_codex(codex)
    if program is None:
        notes.append("codex is not on PATH, so the hooks could not be trusted here: trust "
                     "them in Codex (/hooks), or run `codex exec "
                     "--dangerously-bypass-hook-trust` (or install again with --codex PATH)")
    else:
        try:
            hashes = cc.hook_hashes(program, hooks.after, user_scope=scope == "user")
        except InputError as exc:  # an older Codex, or one that fails: the rest still helps
            hashes = {}
            notes.append(f"could not ask Codex for the hooks' hashes ({exc}); trust them "
                         "in Codex (/hooks)")
        mine = ours_keys(hooks.after, "codex")
        if hashes and not mine <= set(hashes):
            notes.append(f"{program} did not list every harness hook; trust them in Codex "
                         "(/hooks)")
        real = str(hooks.path)
        state = doc.get("hooks", {}).get("state", {}) if isinstance(doc.get("hooks"), dict) \
            else {}
        for rel in sorted(mine & set(hashes)):
            key = f"{real}:{rel}"
            entry = state.get(key) if isinstance(state, dict) else None
            if isinstance(entry, dict) and entry.get("trusted_hash") == hashes[rel]:
                continue
            text = cc.set_value(text, ["hooks", "state", key], "trusted_hash", hashes[rel],
                                where=where)
            changes.append(f"hooks.state.{rel}")
    if scope == "project" and not cc.project_trusted(doc, cwd):
        notes.append(f"Codex ignores .codex/ until you trust this project: answer yes when "
                     f"Codex asks on its first start in {cwd}, or add "
                     f"[projects.{json.dumps(str(cwd))}] trust_level = \"trusted\" to {path}")
    return InstallPlan(path=path, before=before, after=text if changes else (before or ""),
                       events=changes, notes=notes)


# -- Gemini CLI: the task tools, or the MCP server --------------------------------------------

TRACKER_NOTE = ("Gemini CLI's task tracker goes on (experimental.taskTracker): its current "
                "models get task tools, whose calls the hooks copy into the store; "
                "--no-task-tools leaves it off")


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


def gemini_settings(hooks: InstallPlan, *, scope: str, cwd: Path, command: str | None,
                    task_tools: bool) -> InstallPlan:
    """The hooks' plan, with what else Gemini CLI needs in the same file: the task tracker
    (the model's todo tool) on, or, with ``task_tools`` False and no ``write_todos`` for
    the configured model, the harness MCP server (``harness mcp --agent gemini-cli``,
    serving the todo tools: it writes as the hooks do, to their session)."""
    from harness.agents.claude.install import mcp_servers_change

    where = str(hooks.path)
    doc = json.loads(hooks.after) if hooks.after.strip() else {}
    settings = list(hooks.settings)
    notes = list(hooks.notes)
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
            settings += mcp_servers_change(doc, command_argv(command, "gemini-cli"),
                                           where=where, agent="gemini-cli")
    if scope == "project" and not gemini_trusted(cwd):
        notes.append(f"Gemini CLI reads {hooks.path.parent.name}/settings.json only in a "
                     f"trusted folder: trust {cwd} when Gemini CLI asks (or run it with "
                     "--skip-trust, or GEMINI_CLI_TRUST_WORKSPACE=true, headless)")
    return InstallPlan(path=hooks.path, before=hooks.before,
                       after=_dumped(doc, hooks.before, bool(hooks.events or settings)),
                       events=hooks.events, notes=notes, settings=settings,
                       action=hooks.action)


# -- GitHub Copilot CLI: a hooks file of our own, or the user's settings ------------------------

# Its payloads do not name the event: each hook's command does (``--event``).
COPILOT_EVENTS = ("sessionStart", "userPromptSubmitted", "postToolUse", "preCompact")


def copilot_install(*, scope: str, cwd: Path, command: str | None = None) -> InstallPlan:
    """Copilot CLI's hooks: the project's ``.github/hooks/todo-harness.json`` (a file of
    ours, ``{"version": 1, "hooks": {...}}``), or ``hooks`` in the user's
    ``$COPILOT_HOME/settings.json``; each event ``{"type": "command", "bash": "harness hook
    copilot --event EVENT", "timeoutSec": 30}``."""
    project = scope == "project"
    path = cwd / ".github" / "hooks" / "todo-harness.json" if project \
        else copilot_home() / "settings.json"
    where = str(path)
    before, doc = read_json(path)
    if project:
        doc.setdefault("version", 1)
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InputError("`hooks` is not an object", where=where)
    cmd = command or default_command("copilot")
    added = []
    for event in COPILOT_EVENTS:
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise InputError(f"`hooks.{event}` is not a list", where=where)
        if any(is_ours(e, "copilot") for e in entries):
            continue
        entries.append({"type": "command", "bash": f"{cmd} --event {event}", "timeoutSec": 30})
        added.append(event)
    notes = []
    if project:
        notes.append("Copilot CLI runs a repository's .github/hooks/ only in a folder it "
                     "trusts: answer yes when it asks (headless: --trust-folder, or "
                     "COPILOT_ALLOW_ALL=true)")
    return InstallPlan(path=path, before=before, after=_dumped(doc, before, bool(added)),
                       events=added, notes=notes, action="added the harness hooks")
