"""Which agents the harness supports: the one table that names them.

Each agent is one folder under ``harness/agents/`` whose ``agent.py`` holds one
:class:`harness.agents.seam.Agent`; it is named here, once, as ``"module:attribute"``, and
imported only when it is used (a hook call imports its own agent and no other). The
table's order is the order ``harness doctor`` and ``harness hook --help`` list them in,
and the order ``harness import`` asks them whether a file is theirs.

Adding an agent, e.g. ``aider``: write ``harness/agents/aider/agent.py`` with ``AGENT =
Aider()`` (a subclass of :class:`~harness.agents.seam.Agent`), add ``"aider":
"harness.agents.aider.agent:AGENT"`` to :data:`AGENTS` (or call :func:`register_agent`
from a plugin), and one test file; ``harness hook aider``, its install, doctor, prime and
import then reach it (docs/ARCHITECTURE.md, "Adding an agent"). Standard library only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.agents.seam import Agent

__all__ = ["AGENTS", "agent", "agents", "by_format", "names", "register_agent"]

AGENTS: dict[str, str] = {
    "claude-code": "harness.agents.claude.agent:AGENT",
    "codex": "harness.agents.codex.agent:AGENT",
    "opencode": "harness.agents.opencode.agent:AGENT",
    "gemini-cli": "harness.agents.gemini.agent:AGENT",
    "copilot": "harness.agents.copilot.agent:AGENT",
    "pi": "harness.agents.pi.agent:AGENT",
}

_loaded: dict[str, Agent] = {}


def register_agent(name: str, target: str) -> None:
    """Name the ``"module:attribute"`` that holds agent ``name``."""
    if ":" not in target:
        raise ValueError(f"agent target {target!r} must read 'module:attribute'")
    AGENTS[name] = target
    _loaded.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(AGENTS)


def agent(name: str) -> Agent:
    """The agent registered as ``name``, imported now."""
    found = _loaded.get(name)
    if found is not None:
        return found
    target = AGENTS.get(name)
    if target is None:
        raise UsageError(f"unknown agent {name!r} (known: {', '.join(AGENTS)})")
    module, _, attr = target.partition(":")
    found = getattr(importlib.import_module(module), attr)
    _loaded[name] = found
    return found


def agents() -> list[Agent]:
    """Every registered agent, in the table's order."""
    return [agent(name) for name in AGENTS]


def by_format(fmt: str) -> Agent | None:
    """The agent whose transcripts are in format ``fmt`` (None: no agent's)."""
    for a in agents():
        if fmt in a.formats:
            return a
    return None
