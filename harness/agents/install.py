"""``harness hook claude-code install`` and ``harness hook codex install``: merge the
harness's hooks into the agent's own hook settings.

Claude Code reads ``.claude/settings.json`` (project) and ``~/.claude/settings.json``
(user, or ``$CLAUDE_CONFIG_DIR/settings.json``); Codex reads ``.codex/hooks.json`` and
``$CODEX_HOME/hooks.json`` (default ``~/.codex``). Both keep hooks as ``{"hooks": {EVENT:
[{"matcher": ..., "hooks": [{"type": "command", "command": ...}]}]}}``.

The merge keeps everything else in the file, in its order. An event that already has a
command hook running ``harness hook AGENT`` (however it is spelt: a path, a
``HARNESS_SESSION=...`` prefix) is left as it is; the others get a group of their own
appended. So installing twice changes nothing, and an older install gains the events it
lacks. The file is written whole, beside itself and renamed into place.

For Claude Code the same settings file also turns its todo tools on and lets the harness
MCP server's todo tools run, and the server is registered (:mod:`harness.agents.claude_install`).
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
from harness.paths import codex_home

if TYPE_CHECKING:
    from harness.agents.claude_install import SettingsChange

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
AGENTS = {"claude-code": CLAUDE_EVENTS, "codex": CODEX_EVENTS}


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
    return (isinstance(hook, dict) and isinstance(hook.get("command"), str)
            and re.search(rf"\bhook\s+{re.escape(agent)}\b", hook["command"]) is not None)


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
        group["hooks"] = [{"type": "command", "command": cmd}]
        groups.append(group)
        added.append(event)
    notes = _narrow_matchers(hooks, agent)
    claude = None
    if agent == "claude-code":
        from harness.agents.claude_install import settings_changes

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
    (:func:`harness.agents.claude_install.mcp_config_path`)."""
    from harness.agents.claude_install import mcp_config_path, mcp_servers_change

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
    :mod:`harness.agents.codex_config`). What install cannot do is in the notes."""
    from harness.agents import codex_config as cc

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
