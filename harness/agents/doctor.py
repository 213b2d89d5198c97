"""``harness doctor``: for each agent program found here, whether its model can write
todos, whether the harness sees them, and what to set where it cannot.

Each agent is one entry of :data:`CHECKS`, a function of the project directory and the
program found (its path and version) to a :class:`Finding`; an agent added to the
harness adds one function and one line there. Nothing is changed and no agent is
started: the version comes from the program's ``package.json`` (every agent here comes
from npm), else from ``--version``; the rest is read from the agents' settings files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.agents.claude import install as ci
from harness.errors import InputError
from harness.paths import codex_home, copilot_home, gemini_dir

VERSION_TIMEOUT = 15.0
INSTALL_CLAUDE = "run `harness hook claude-code install` here"


@dataclass
class Finding:
    agent: str
    program: str | None = None  # its path; None: not found
    version: str | None = None
    writes: bool = False  # the model can write todos
    how: str = ""  # with what, or why not
    seen: bool = False  # the harness gets what it writes
    seen_how: str = ""
    todo: list[str] = field(default_factory=list)  # what to set, in order

    @property
    def found(self) -> bool:
        return self.program is not None

    @property
    def ok(self) -> bool:
        return not self.found or (self.writes and self.seen)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "found": self.found, "ok": self.ok}


# -- reading what is there ------------------------------------------------------------------

def _json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _version_of(program: Path) -> str | None:
    """The npm package's version beside the program, else its ``--version``."""
    real = program.resolve()
    for d in list(real.parents)[:4]:
        doc = _json(d / "package.json")
        if isinstance(doc.get("version"), str) and doc.get("bin"):
            return str(doc["version"])
    try:
        r = subprocess.run([str(program), "--version"], capture_output=True, text=True,
                           timeout=VERSION_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\d+\.\d+\.\d+", r.stdout)
    return m.group(0) if m else None


def _at_least(version: str | None, floor: tuple[int, ...]) -> bool:
    if not version:
        return True  # unknown: assume today's
    parts = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
    return parts >= floor


def _rel(path: Path, project: Path) -> str:
    try:
        return str(path.relative_to(project))
    except ValueError:
        return str(path)


# -- Claude Code ----------------------------------------------------------------------------

# The models 2.1.332 still gives its todo tools without the switch (its own list): older
# than Opus 4.8 and Sonnet 5.
_UNGATED_MODEL = re.compile(r"^claude-(3-|3-5-|3-7-|opus-4-[0-7]\b|sonnet-4-[0-6]\b|"
                            r"haiku-4-5\b)")


def claude_settings(project: Path) -> list[Path]:
    """Claude Code's settings files, weakest first (user, project, project local)."""
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    user = (Path(base).expanduser() if base else Path.home() / ".claude") / "settings.json"
    return [user, project / ".claude" / "settings.json",
            project / ".claude" / "settings.local.json"]


def claude(project: Path, program: Path, version: str | None) -> Finding:
    from harness.agents.install import is_ours

    f = Finding("claude-code", str(program), version)
    docs = [(p, _json(p)) for p in claude_settings(project)]
    switch, where = os.environ.get(ci.TODO_TOOLS_ENV), "the environment"
    model = os.environ.get("ANTHROPIC_MODEL")
    if switch is None:
        for path, doc in reversed(docs):
            env = doc.get("env") if isinstance(doc.get("env"), dict) else {}
            if ci.TODO_TOOLS_ENV in env:
                switch, where = str(env[ci.TODO_TOOLS_ENV]), _rel(path, project)
                break
    for _, doc in reversed(docs):
        if model is None and isinstance(doc.get("model"), str):
            model = doc["model"]
    gated = _at_least(version, ci.GATED_SINCE) and not (
        model is not None and _UNGATED_MODEL.match(model))
    hooked = [p for p, doc in docs if any(
        is_ours(h, "claude-code") for g in (doc.get("hooks") or {}).get("PostToolUse") or []
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
        f.seen_how = f"through the harness MCP server ({_rel(server, project)})"
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
        f.seen, f.seen_how = True, f"the harness hooks in {_rel(hooked[-1], project)}"
    else:
        f.seen_how = "no harness hooks in Claude Code's settings"
        f.todo.append(f"{INSTALL_CLAUDE} (installs the hooks)")
    return f


# -- Codex ----------------------------------------------------------------------------------

def codex(project: Path, program: Path, version: str | None) -> Finding:
    from harness.agents.codex import config as cc

    f = Finding("codex", str(program), version)
    config = cc.config_path()
    try:
        doc = cc.read(config)[1]
    except InputError as exc:  # a config Codex itself would refuse: say so, carry on
        doc = {}
        f.todo.append(f"fix {config}: {exc}")
    needs = []  # what `harness hook codex install` would do here
    if cc.lookup(doc, ["tools", "update_plan", "enabled"]) is True:
        f.writes, f.how = True, f"update_plan ([tools.update_plan] enabled in {config})"
    else:
        f.how = f"update_plan is off: [tools.update_plan] enabled = true is not in {config}"
        needs.append("turns update_plan on")
    hooks = [p for p in (project / ".codex" / "hooks.json", codex_home() / "hooks.json")
             if _has_ours(p)]
    state = doc.get("hooks", {}).get("state", {}) if isinstance(doc.get("hooks"), dict) \
        else {}
    trusted = any(isinstance(k, str) and k.startswith(str(p) + ":") for p in hooks
                  for k in (state if isinstance(state, dict) else {}))
    if not hooks:
        f.seen_how = "no harness hooks in .codex/hooks.json"
        needs.append("installs and trusts the hooks")
    elif not trusted:
        f.seen_how = f"the hooks in {_rel(hooks[0], project)} are not trusted"
        needs.append("trusts the hooks")
    else:
        f.seen, f.seen_how = True, f"the harness hooks in {_rel(hooks[0], project)}"
    if needs:
        f.todo.append(f"run `harness hook codex install` here ({', '.join(needs)})")
    if hooks and hooks[0].parent.parent == project and not cc.project_trusted(doc, project):
        f.seen = False
        f.seen_how += ", in a project Codex does not trust (it ignores .codex/ until then)"
        f.todo.append(f"trust this project in Codex: [projects.{json.dumps(str(project))}] "
                      "trust_level = \"trusted\" in its config.toml, or yes on its first start")
    return f


def _has_ours(hooks_file: Path) -> bool:
    from harness.agents.install import ours_keys

    try:
        return bool(ours_keys(hooks_file.read_text(encoding="utf-8"), "codex"))
    except (OSError, ValueError, AttributeError):
        return False  # missing or unreadable: Codex would not run it either


# -- opencode -------------------------------------------------------------------------------

PLUGIN = "harness-todos.js"


def opencode(project: Path, program: Path, version: str | None) -> Finding:
    f = Finding("opencode", str(program), version)
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    folders = [project / ".opencode", config_home / "opencode"]
    off = [p for p in (project / "opencode.json", config_home / "opencode" / "opencode.json")
           if (_json(p).get("tools") or {}).get("todowrite") is False]
    if off:
        f.how = f"todowrite is turned off in {_rel(off[0], project)}"
        f.todo.append(f"remove \"todowrite\": false from `tools` in {off[0]}")
    else:
        f.writes, f.how = True, "todowrite (built in)"
    plugin = next((d / sub / PLUGIN for d in folders for sub in ("plugins", "plugin")
                   if (d / sub / PLUGIN).exists()), None)
    if plugin is None:
        f.seen_how = f"no {PLUGIN} in .opencode/plugins/ or ~/.config/opencode/plugins/"
        f.todo.append(f"copy examples/opencode-plugin/{PLUGIN} into .opencode/plugins/")
    else:
        f.seen, f.seen_how = True, f"the plugin {_rel(plugin, project)}"
    return f


# -- Gemini CLI -----------------------------------------------------------------------------

INSTALL_GEMINI = "run `harness hook gemini-cli install` here"


def gemini(project: Path, program: Path, version: str | None) -> Finding:
    from harness.agents.install import gemini_2, gemini_trusted, is_ours

    f = Finding("gemini-cli", str(program), version)
    user = gemini_dir() / "settings.json"
    docs = [(p, _json(p)) for p in (user, project / ".gemini" / "settings.json")]

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
               and ci.MCP_NAME in doc["mcpServers"]]
    if tracker is not None and tracker[1] is True:
        f.writes, f.how = True, f"the task tracker (experimental.taskTracker in " \
                                f"{_rel(tracker[0], project)})"
    elif model is not None and gemini_2(model[1]):
        f.writes, f.how = True, f"write_todos (model.name is {model[1]} in " \
                                f"{_rel(model[0], project)})"
    elif servers:
        f.writes, f.seen = True, True
        f.how = "the harness MCP server's todowrite (the task tracker is off)"
        f.seen_how = f"through the harness MCP server ({_rel(servers[-1], project)})"
        return f
    else:
        f.how = ("Gemini CLI gives its current models no todo tool while the task tracker "
                 "(experimental.taskTracker) is off, and no harness MCP server is registered")
    hooked = [p for p, doc in docs if any(
        is_ours(h, "gemini-cli") for g in (doc.get("hooks") or {}).get("AfterTool") or []
        if isinstance(g, dict) for h in g.get("hooks") or [])]
    needs = [] if f.writes else ["turns the task tracker on"]
    if hooked:
        f.seen, f.seen_how = True, f"the harness hooks in {_rel(hooked[-1], project)}"
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


# -- GitHub Copilot CLI ---------------------------------------------------------------------

def copilot(project: Path, program: Path, version: str | None) -> Finding:
    from harness.agents.install import is_ours

    f = Finding("copilot", str(program), version)
    f.writes, f.how = True, "its session's todos table (the sql tool, built in)"
    files = [*sorted((project / ".github" / "hooks").glob("*.json")),
             copilot_home() / "settings.json"]
    hooked = [p for p in files if any(
        is_ours(h, "copilot") for h in ((_json(p).get("hooks") or {}).get("postToolUse") or [])
        if isinstance(h, dict))]
    if hooked:
        f.seen, f.seen_how = True, f"the harness hooks in {_rel(hooked[0], project)}"
    else:
        f.seen_how = "no harness hooks in .github/hooks/ or Copilot CLI's settings"
        f.todo.append("run `harness hook copilot install` here (installs the hooks)")
    return f


Check = Callable[[Path, Path, str | None], Finding]
# agent -> (its program's name on PATH, the variable that names it instead, the check)
CHECKS: dict[str, tuple[str, str, Check]] = {
    "claude-code": ("claude", "HARNESS_CLAUDE_BIN", claude),
    "codex": ("codex", "HARNESS_CODEX_BIN", codex),
    "opencode": ("opencode", "HARNESS_OPENCODE_BIN", opencode),
    "gemini-cli": ("gemini", "HARNESS_GEMINI_BIN", gemini),
    "copilot": ("copilot", "HARNESS_COPILOT_BIN", copilot),
}


def diagnose(project: Path, agents: list[str] | None = None) -> list[Finding]:
    """One finding per agent of :data:`CHECKS` (or of ``agents``), found or not."""
    out = []
    for name in agents or list(CHECKS):
        exe, env, check = CHECKS[name]
        found = os.environ.get(env) or shutil.which(exe)
        if not found:
            out.append(Finding(name, how=f"no {exe} on PATH, nor in ${env}"))
            continue
        program = Path(found)
        out.append(check(project, program, _version_of(program)))
    return out


def render(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        if not f.found:
            lines.append(f"{f.agent}: not found ({f.how})")
            continue
        lines.append(f"{f.agent} {f.version or '?'} ({f.program})")
        lines.append(f"  writes todos: yes, with {f.how}" if f.writes
                     else f"  writes todos: no ({f.how})")
        lines.append(f"  the harness sees them: yes, {f.seen_how}" if f.seen
                     else f"  the harness sees them: no ({f.seen_how})")
        lines += [f"  to do: {step}" for step in f.todo]
    return "\n".join(lines)
