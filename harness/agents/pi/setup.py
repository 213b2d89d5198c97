"""pi's set-up: ``harness hook pi install`` and ``uninstall``, and what ``harness doctor``
finds.

pi loads TypeScript extensions without a build step from ``.pi/extensions/*.ts`` (the
project) and ``~/.pi/agent/extensions/*.ts`` (the user; ``$PI_CODING_AGENT_DIR/extensions``
when set). Install writes the harness's extension there as ``todo-harness.ts``: the file
beside this module, with the command that runs this harness written into it (pi runs it
with no shell, so the command is a list of words: ``harness`` when that is the one on
PATH, else this harness by its full path). Installing again writes the same bytes, so it
changes nothing; a file of that name that is not the harness's is refused, never
replaced. Uninstall removes the file when it is the one install wrote (for the command
written in it), and refuses to remove one edited since.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

from harness.agents import install as ins
from harness.agents.doctor import Finding, rel
from harness.agents.seam import Installed
from harness.errors import InputError

AGENT = "pi"
FILE = "todo-harness.ts"
TEMPLATE = Path(__file__).with_name(FILE)
MARKER = "// todo-harness: the todo list for pi"
_ARGV = re.compile(r"^const HARNESS: string\[\] = (\[.*\]);$", re.M)


def agent_dir() -> Path:
    """pi's own folder: ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``."""
    raw = os.environ.get("PI_CODING_AGENT_DIR")
    return Path(raw).expanduser() if raw else Path.home() / ".pi" / "agent"


def extension_path(scope: str, cwd: Path) -> Path:
    return (agent_dir() if scope == "user" else cwd / ".pi") / "extensions" / FILE


def extension_text(argv: list[str]) -> str:
    """The extension as install writes it, running ``argv`` (this harness)."""
    template = TEMPLATE.read_text(encoding="utf-8")
    line = f"const HARNESS: string[] = {json.dumps(argv)};"
    return _ARGV.sub(lambda _m: line, template, count=1)


def written_argv(text: str) -> list[str] | None:
    """The command an extension of ours runs (None: not ours, or unreadable)."""
    if not text.startswith(MARKER):
        return None
    m = _ARGV.search(text)
    try:
        argv = json.loads(m.group(1)) if m else None
    except ValueError:
        return None
    return argv if isinstance(argv, list) and argv and all(isinstance(w, str) for w in argv) \
        else None


def harness_words(command: str | None) -> list[str]:
    """``--command`` as the words pi runs (``harness hook pi`` at its end is dropped, and
    a shell prefix such as ``VAR=x``: pi runs it with no shell), else this harness."""
    if not command:
        return ins.harness_argv()
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise InputError(f"cannot read it as a command ({exc})", where="--command") from None
    if words[-2:] == ["hook", AGENT]:
        words = words[:-2]
    words = [w for w in words if not re.match(r"^\w+=", w)]
    if not words:
        raise InputError("no program in it", where="--command")
    return words


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read ({getattr(exc, 'strerror', None) or exc})",
                         where=str(path)) from None


def install(*, scope: str, cwd: Path, command: str | None, dry_run: bool) -> Installed:
    path = extension_path(scope, cwd)
    before = _read(path)
    if before is not None and written_argv(before) is None:
        raise InputError(f"a {FILE} that is not the harness's is there; move it away, then "
                         "install again", where=str(path))
    after = extension_text(harness_words(command))
    changed = after != before
    plan = ins.InstallPlan(path=path, before=before, after=after,
                           events=["todowrite", "session_start", "session_compact",
                                   "before_agent_start", "tool_result"] if changed else [],
                           action="wrote the harness's extension" if before is None
                           else "updated the harness's extension")
    notes = ["pi loads it on its next start (or /reload): its model gets a todowrite tool "
             "whose list the harness keeps; `harness hook pi uninstall` removes it"]
    return Installed(plans=[plan], notes=notes)


def uninstall(*, scope: str, cwd: Path) -> Installed:
    path = extension_path(scope, cwd)
    before = _read(path)
    if before is None:
        return Installed(plans=[ins.InstallPlan(path=path, before=None, after=None,
                                                events=[])])
    argv = written_argv(before)
    if argv is None:
        raise InputError(f"this {FILE} is not the harness's: left as it is", where=str(path))
    if extension_text(argv) != before:
        raise InputError("edited since `harness hook pi install` wrote it: left as it is "
                         "(remove it yourself, or install again to replace it)",
                         where=str(path))
    return Installed(plans=[ins.InstallPlan(path=path, before=before, after=None,
                                            events=["todowrite"],
                                            action="removed the harness's extension")])


# -- doctor ---------------------------------------------------------------------------------

def doctor(project: Path, program: Path, version: str | None) -> Finding:
    f = Finding(AGENT, str(program), version)
    found = [p for p in (extension_path("project", project), extension_path("user", project))
             if p.exists()]
    ours = [(p, written_argv(_read(p) or "")) for p in found]
    ours = [(p, argv) for p, argv in ours if argv is not None]
    if not ours:
        f.how = "pi has no todo tool of its own, and the harness's extension is not installed"
        f.seen_how = f"no {FILE} in .pi/extensions/ or {rel(agent_dir(), project)}/extensions/"
        f.todo.append("run `harness hook pi install` here (writes the extension: a "
                      "todowrite tool backed by the harness)")
        return f
    path, argv = ours[0]
    f.writes, f.how = True, f"todowrite (the harness's extension, {rel(path, project)})"
    program_found = shutil.which(argv[0]) if os.sep not in argv[0] else (
        argv[0] if Path(argv[0]).exists() else None)
    if program_found is None:
        f.seen_how = f"the extension runs {argv[0]}, which is not there"
        f.todo.append("run `harness hook pi install` here again (writes this harness's "
                      "command into the extension)")
    else:
        f.seen, f.seen_how = True, f"the extension in {rel(path, project)}, through " \
                                   f"{shlex.join(argv)}"
    return f
