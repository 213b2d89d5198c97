"""Importing agent transcripts (and ``harness export`` files) into the store.

Each transcript format is an agent's: the agent's folder reads it
(:meth:`harness.agents.seam.Agent.transcript`, listed in :mod:`harness.agents.registry`;
``harness import --help`` lists them). Here: which format a file is in (:mod:`.detect`,
asking each agent), importing one file with the transaction and idempotency rules
(:mod:`.engine`), a folder an agent keeps its list in (:func:`import_path`), and
``harness export`` files (:mod:`.harness_jsonl`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.agents.registry import agents
from harness.agents.seam import Agent
from harness.agents.transcripts import ImportReport
from harness.importers.detect import detect, formats
from harness.importers.engine import import_file
from state.store import Store


def directory_agent(path: Path) -> Agent | None:
    """The agent whose folder ``path`` is (a Claude Code task list), if any."""
    if not path.is_dir():
        return None
    return next((a for a in agents() if a.reads_directory(path)), None)


def import_path(store: Store, path: Path, *, session: str | None,
                **options: Any) -> ImportReport:
    """One file (:func:`import_file`, ``options`` its own) or an agent's folder."""
    owner = directory_agent(path)
    if owner is not None:
        return owner.import_directory(store, path, session=session)
    return import_file(store, path, session=session, **options)


__all__ = ["ImportReport", "detect", "directory_agent", "formats", "import_file",
           "import_path"]
