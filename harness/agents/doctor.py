"""``harness doctor``: for each agent program found here, whether its model can write
todos, whether the harness sees them, and what to set where it cannot.

Each agent of the registry (:mod:`harness.agents.registry`) answers for itself
(:meth:`harness.agents.seam.Agent.doctor`: the project directory and the program found, its
path and version, to a :class:`Finding`); this module finds the programs and renders the
findings. Nothing is changed and no agent is started: the version comes from the
program's ``package.json`` (every agent here comes from npm), else from ``--version``; the
rest is read from the agents' settings files. A finding about something other than an
agent's program is a :class:`Finding` too, added to the list :func:`diagnose` returns.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from harness.agents.seam import Finding

__all__ = ["Finding", "at_least", "diagnose", "read_doc", "rel", "render", "version_of"]

VERSION_TIMEOUT = 15.0


# -- reading what is there ------------------------------------------------------------------

def read_doc(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def version_of(program: Path) -> str | None:
    """The npm package's version beside the program, else its ``--version``."""
    real = program.resolve()
    for d in list(real.parents)[:4]:
        doc = read_doc(d / "package.json")
        if isinstance(doc.get("version"), str) and doc.get("bin"):
            return str(doc["version"])
    try:
        r = subprocess.run([str(program), "--version"], capture_output=True, text=True,
                           timeout=VERSION_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\d+\.\d+\.\d+", r.stdout)
    return m.group(0) if m else None


def at_least(version: str | None, floor: tuple[int, ...]) -> bool:
    if not version:
        return True  # unknown: assume today's
    parts = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
    return parts >= floor


def rel(path: Path, project: Path) -> str:
    try:
        return str(path.relative_to(project))
    except ValueError:
        return str(path)


def diagnose(project: Path, agents: list[str] | None = None) -> list[Finding]:
    """One finding per registered agent (or per one of ``agents``), found or not."""
    from harness.agents.registry import agent, names

    out = []
    for name in agents or list(names()):
        a = agent(name)
        found = os.environ.get(a.program_env) or shutil.which(a.program)
        if not found:
            f = Finding(name, how=f"no {a.program} on PATH, nor in ${a.program_env}")
        else:
            program = Path(found)
            f = a.doctor(project, program, version_of(program))
        f.tools, f.notices = list(a.todo_tools), a.notices
        out.append(f)
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
