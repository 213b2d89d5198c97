"""Installing and uninstalling an agent's hooks: what every agent's ``setup.py`` shares.

Most agents keep command hooks in a JSON settings file, as
``{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type": "command", "command": ...}]}]}}``
(Claude Code, Codex, Gemini CLI; Copilot CLI with ``bash`` for ``command``). Each agent's
``setup.py`` says which file and which events, and builds on these pieces: the plan of a
file's change (:class:`InstallPlan`, shown as a diff with ``--dry-run``, else written whole,
beside itself and renamed into place), how an agent should run this harness
(:func:`harness_argv`), reading a settings file (:func:`read_json`), and the merge
(:func:`merge_hooks`) and its undoing (:func:`remove_hooks`).

The merge keeps everything else in the file, in its order. An event that already has a
command hook running ``harness hook AGENT`` (however it is spelt: a path, a
``HARNESS_SESSION=...`` prefix) is left as it is; the others get a group of their own
appended. So installing twice changes nothing, and an older install gains the events it
lacks. Uninstalling removes the hooks that run ``harness hook AGENT`` and nothing else
(a group or an event left empty by that goes too).
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
from typing import Any

from harness.errors import InputError

# event -> matcher (None: the event takes none, or we want every occurrence)
Events = dict[str, str | None]


@dataclass
class InstallPlan:
    path: Path
    before: str | None  # the file as it is (None: it does not exist)
    after: str | None  # the file as it will be (None: removed)
    events: list[str]  # the events that gain a harness hook
    notes: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)  # other settings set
    action: str = "set"  # what gaining ``events`` is called

    @property
    def changed(self) -> bool:
        return bool(self.events or self.settings)

    @property
    def diff(self) -> str:
        if not self.changed:
            return ""
        old = (self.before or "").splitlines(keepends=True)
        new = (self.after or "").splitlines(keepends=True)
        name = str(self.path)
        return "".join(difflib.unified_diff(
            old, new, fromfile=name if self.before is not None else "/dev/null",
            tofile=name if self.after is not None else "/dev/null"))

    def write(self) -> None:
        if self.after is None:  # the file goes (an uninstall)
            self.path.unlink(missing_ok=True)
            return
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


def narrow_matchers(hooks: dict[str, Any], agent: str, events: Events) -> list[str]:
    """What an older install of ours misses inside an event it already hooks (a
    matcher without tools added since); said, not rewritten, since the user may have
    narrowed it on purpose."""
    notes = []
    for event, matcher in events.items():
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
    return before, read_json_text(before or "", where)


def read_json_text(text: str, where: str) -> dict[str, Any]:
    """A settings file's text as its object (empty text: an empty one)."""
    doc: Any = {}
    if text.strip():
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InputError(f"not valid JSON ({exc}); fix it, then install again",
                             where=where) from None
    if not isinstance(doc, dict):
        raise InputError(f"the settings are a {type(doc).__name__}, not a JSON object",
                         where=where)
    return doc


def dumped(doc: dict[str, Any], before: str | None, changed: bool) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n" if changed else (before or "")


def hooks_of(doc: dict[str, Any], where: str) -> dict[str, Any]:
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InputError("`hooks` is not an object", where=where)
    return hooks


def merge_hooks(doc: dict[str, Any], agent: str, events: Events, command: str, *,
                where: str, named: bool = False) -> tuple[list[str], list[str]]:
    """Add a command hook running ``command`` for each of ``events`` that has none of
    ours, in place: (the events that gained one, notes on narrowed matchers). ``named``:
    the hook carries ``"name": "todo-harness"`` (how Gemini CLI names it to the user)."""
    hooks = hooks_of(doc, where)
    added = []
    for event, matcher in events.items():
        groups = hooks.get(event)
        if groups is None:
            groups = hooks[event] = []
        if not isinstance(groups, list):
            raise InputError(f"`hooks.{event}` is not a list", where=where)
        if any(isinstance(g, dict) and isinstance(g.get("hooks"), list)
               and any(is_ours(h, agent) for h in g["hooks"]) for g in groups):
            continue
        group: dict[str, Any] = {"matcher": matcher} if matcher else {}
        hook: dict[str, Any] = {"type": "command", "command": command}
        if named:
            hook = {"name": "todo-harness", **hook}
        group["hooks"] = [hook]
        groups.append(group)
        added.append(event)
    return added, narrow_matchers(hooks, agent, events)


def remove_hooks(doc: dict[str, Any], agent: str, *, where: str,
                 grouped: bool = True) -> list[str]:
    """Remove every hook of ours from ``doc`` (in place): the events that lost one. A
    group, an event or ``hooks`` left empty by it is removed too. ``grouped``: events
    hold groups of hooks (Claude Code, Codex, Gemini CLI), else the hooks themselves
    (Copilot CLI)."""
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        return []
    removed = []
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept: list[Any] = []
        for entry in entries:
            if not grouped:
                if not is_ours(entry, agent):
                    kept.append(entry)
                continue
            inner = entry.get("hooks") if isinstance(entry, dict) else None
            if not isinstance(inner, list) or not any(is_ours(h, agent) for h in inner):
                kept.append(entry)
                continue
            rest = [h for h in inner if not is_ours(h, agent)]
            if rest:
                kept.append({**entry, "hooks": rest})
        if len(kept) != len(entries) or kept != entries:
            removed.append(event)
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if removed and not hooks:
        del doc["hooks"]
    return removed


def without_hooks(path: Path, agent: str, *, grouped: bool = True) -> InstallPlan:
    """The plan that removes our hooks from the settings file ``path``."""
    before, doc = read_json(path)
    removed = remove_hooks(doc, agent, where=str(path), grouped=grouped)
    # A file that held nothing but our hooks (install made it) goes with them.
    after = None if removed and not doc else dumped(doc, before, bool(removed))
    return InstallPlan(path=path, before=before, after=after, events=removed,
                       action="removed the harness hooks")
