"""GitHub Copilot CLI's set-up: ``harness hook copilot install`` and ``uninstall``, and
what ``harness doctor`` finds.

Its hooks: the project's ``.github/hooks/todo-harness.json`` (a file of ours, ``{"version":
1, "hooks": {...}}``), or ``hooks`` in the user's ``$COPILOT_HOME/settings.json``; each
event ``{"type": "command", "bash": "harness hook copilot --event EVENT", "timeoutSec":
30}`` (its payloads do not name the event: each hook's command does). Uninstalling
removes our hooks; the project's file goes when nothing else is left in it.
"""

from __future__ import annotations

from pathlib import Path

from harness.agents import install as ins
from harness.agents.doctor import Finding, read_doc, rel
from harness.agents.seam import Installed
from harness.errors import InputError
from harness.paths import copilot_home

AGENT = "copilot"
EVENTS = ("sessionStart", "userPromptSubmitted", "postToolUse", "preCompact")
TRUST_NOTE = ("Copilot CLI runs a repository's .github/hooks/ only in a folder it trusts: "
              "answer yes when it asks (headless: --trust-folder, or COPILOT_ALLOW_ALL=true)")


def settings_path(scope: str, cwd: Path) -> Path:
    return cwd / ".github" / "hooks" / "todo-harness.json" if scope == "project" \
        else copilot_home() / "settings.json"


def install(*, scope: str, cwd: Path, command: str | None, dry_run: bool) -> Installed:
    project = scope == "project"
    path = settings_path(scope, cwd)
    where = str(path)
    before, doc = ins.read_json(path)
    if project:
        doc.setdefault("version", 1)
    hooks = ins.hooks_of(doc, where)
    cmd = command or ins.default_command(AGENT)
    added = []
    for event in EVENTS:
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise InputError(f"`hooks.{event}` is not a list", where=where)
        if any(ins.is_ours(e, AGENT) for e in entries):
            continue
        entries.append({"type": "command", "bash": f"{cmd} --event {event}", "timeoutSec": 30})
        added.append(event)
    notes = [TRUST_NOTE] if project else []
    plan = ins.InstallPlan(path=path, before=before, after=ins.dumped(doc, before, bool(added)),
                           events=added, notes=notes, action="added the harness hooks")
    return Installed(plans=[plan], notes=notes)


def uninstall(*, scope: str, cwd: Path) -> Installed:
    path = settings_path(scope, cwd)
    plan = ins.without_hooks(path, AGENT, grouped=False)
    if scope == "project" and plan.events and plan.after is not None \
            and set(ins.read_json_text(plan.after, str(path))) <= {"version"}:
        plan.after = None  # the file install made, with nothing left in it: it goes
    return Installed(plans=[plan])


def doctor(project: Path, program: Path, version: str | None) -> Finding:
    f = Finding(AGENT, str(program), version)
    f.writes, f.how = True, "its session's todos table (the sql tool, built in)"
    files = [*sorted((project / ".github" / "hooks").glob("*.json")),
             copilot_home() / "settings.json"]
    hooked = [p for p in files if any(
        ins.is_ours(h, AGENT) for h in ((read_doc(p).get("hooks") or {}).get("postToolUse")
                                        or []) if isinstance(h, dict))]
    if hooked:
        f.seen, f.seen_how = True, f"the harness hooks in {rel(hooked[0], project)}"
    else:
        f.seen_how = "no harness hooks in .github/hooks/ or Copilot CLI's settings"
        f.todo.append("run `harness hook copilot install` here (installs the hooks)")
    return f
