"""Codex's set-up: ``harness hook codex install`` and ``uninstall``, and what ``harness
doctor`` finds.

The hooks go into ``.codex/hooks.json`` (project) or ``$CODEX_HOME/hooks.json`` (user,
default ``~/.codex``), and ``$CODEX_HOME/config.toml`` gets what Codex needs to run them:
the ``update_plan`` tool enabled, and our hooks trusted (their hash asked of Codex itself;
:mod:`harness.agents.codex.config`). What install cannot do (trusting the project) is
said. Uninstalling removes the hooks; ``config.toml`` is left as it is (its trust entries
for hooks that are gone are inert, and ``update_plan`` is Codex's own tool).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.agents import install as ins
from harness.agents.codex import config as cc
from harness.agents.doctor import Finding, rel
from harness.agents.seam import Installed
from harness.errors import InputError
from harness.paths import codex_home

AGENT = "codex"
EVENTS: ins.Events = {
    "SessionStart": "startup|resume|clear|compact",
    "PreCompact": None,
    "PostCompact": None,
    "PostToolUse": "update_plan",
    "UserPromptSubmit": None,  # carries a person's change since Codex last saw the list
}


def settings_path(scope: str, cwd: Path) -> Path:
    return codex_home() / "hooks.json" if scope == "user" else cwd / ".codex" / "hooks.json"


def ours_keys(hooks_text: str, agent: str = AGENT) -> set[str]:
    """Codex's relative keys (``post_tool_use:0:0``) of our hooks in a hooks file."""
    doc = json.loads(hooks_text) if hooks_text.strip() else {}
    keys = set()
    for event, groups in (doc.get("hooks") or {}).items():
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()
        for gi, group in enumerate(groups if isinstance(groups, list) else []):
            hooks = group.get("hooks") if isinstance(group, dict) else None
            for hi, hook in enumerate(hooks if isinstance(hooks, list) else []):
                if ins.is_ours(hook, agent):
                    keys.add(f"{snake}:{gi}:{hi}")
    return keys


def hooks_plan(*, scope: str, cwd: Path, command: str | None) -> ins.InstallPlan:
    path = settings_path(scope, cwd)
    before, doc = ins.read_json(path)
    added, notes = ins.merge_hooks(doc, AGENT, EVENTS, command or ins.default_command(AGENT),
                                   where=str(path))
    return ins.InstallPlan(path=path, before=before, after=ins.dumped(doc, before, bool(added)),
                           events=added, notes=notes, action="added the harness hooks")


def config_plan(hooks: ins.InstallPlan, *, scope: str, cwd: Path,
                codex: str | None = None) -> ins.InstallPlan:
    """What Codex's ``config.toml`` needs for the hooks in ``hooks.after`` to run: the
    ``update_plan`` tool enabled, and our hooks trusted. What install cannot do is in the
    notes."""
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
    after = hooks.after or ""
    if program is None:
        notes.append("codex is not on PATH, so the hooks could not be trusted here: trust "
                     "them in Codex (/hooks), or run `codex exec "
                     "--dangerously-bypass-hook-trust` (or install again with --codex PATH)")
    else:
        try:
            hashes = cc.hook_hashes(program, after, user_scope=scope == "user")
        except InputError as exc:  # an older Codex, or one that fails: the rest still helps
            hashes = {}
            notes.append(f"could not ask Codex for the hooks' hashes ({exc}); trust them "
                         "in Codex (/hooks)")
        mine = ours_keys(after)
        if hashes and not mine <= set(hashes):
            notes.append(f"{program} did not list every harness hook; trust them in Codex "
                         "(/hooks)")
        real = str(hooks.path)
        state = doc.get("hooks", {}).get("state", {}) if isinstance(doc.get("hooks"), dict) \
            else {}
        for key_rel in sorted(mine & set(hashes)):
            key = f"{real}:{key_rel}"
            entry = state.get(key) if isinstance(state, dict) else None
            if isinstance(entry, dict) and entry.get("trusted_hash") == hashes[key_rel]:
                continue
            text = cc.set_value(text, ["hooks", "state", key], "trusted_hash",
                                hashes[key_rel], where=where)
            changes.append(f"hooks.state.{key_rel}")
    if scope == "project" and not cc.project_trusted(doc, cwd):
        notes.append(f"Codex ignores .codex/ until you trust this project: answer yes when "
                     f"Codex asks on its first start in {cwd}, or add "
                     f"[projects.{json.dumps(str(cwd))}] trust_level = \"trusted\" to {path}")
    return ins.InstallPlan(path=path, before=before,
                           after=text if changes else (before or ""), events=changes,
                           notes=notes)


def install(*, scope: str, cwd: Path, command: str | None, dry_run: bool,
            codex: str | None = None) -> Installed:
    hooks = hooks_plan(scope=scope, cwd=cwd, command=command)
    config = config_plan(hooks, scope=scope, cwd=cwd, codex=codex)
    return Installed(plans=[hooks, config], notes=hooks.notes, left=config.notes)


def uninstall(*, scope: str, cwd: Path) -> Installed:
    return Installed(plans=[ins.without_hooks(settings_path(scope, cwd), AGENT)], notes=[
        f"{cc.config_path()} is left as it is (update_plan, and trust entries for hooks that "
        "are gone)"])


# -- doctor ---------------------------------------------------------------------------------

def _has_ours(hooks_file: Path) -> bool:
    try:
        return bool(ours_keys(hooks_file.read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        return False  # missing or unreadable: Codex would not run it either


def doctor(project: Path, program: Path, version: str | None) -> Finding:
    f = Finding(AGENT, str(program), version)
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
    hooks = [p for p in (settings_path("project", project), settings_path("user", project))
             if _has_ours(p)]
    state = doc.get("hooks", {}).get("state", {}) if isinstance(doc.get("hooks"), dict) \
        else {}
    trusted = any(isinstance(k, str) and k.startswith(str(p) + ":") for p in hooks
                  for k in (state if isinstance(state, dict) else {}))
    if not hooks:
        f.seen_how = "no harness hooks in .codex/hooks.json"
        needs.append("installs and trusts the hooks")
    elif not trusted:
        f.seen_how = f"the hooks in {rel(hooks[0], project)} are not trusted"
        needs.append("trusts the hooks")
    else:
        f.seen, f.seen_how = True, f"the harness hooks in {rel(hooks[0], project)}"
    if needs:
        f.todo.append(f"run `harness hook codex install` here ({', '.join(needs)})")
    if hooks and hooks[0].parent.parent == project and not cc.project_trusted(doc, project):
        f.seen = False
        f.seen_how += ", in a project Codex does not trust (it ignores .codex/ until then)"
        f.todo.append(f"trust this project in Codex: [projects.{json.dumps(str(project))}] "
                      "trust_level = \"trusted\" in its config.toml, or yes on its first start")
    return f
