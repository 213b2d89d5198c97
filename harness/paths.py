"""Where things are: the store, the user's config, the current session.

The store is found by ``--db`` > ``HARNESS_DB`` (a path or an SQLAlchemy URL) >
``.harness/state.db`` in the current directory or the nearest parent that has one > the
user data directory (platformdirs; ``HARNESS_DATA_DIR`` overrides it).

The current session is per user and per store (``harness session use``), kept in
``<config dir>/sessions.json`` (``HARNESS_CONFIG_DIR`` overrides the directory), so people
sharing one PostgreSQL store do not switch each other's sessions.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

APP = "todo-harness"
PROJECT_DIR = ".harness"
STORE_FILE = "state.db"
DEFAULT_SESSION = "default"
DEFAULT_STORE_HOW = "the user data directory"


# platformdirs and tempfile are imported where used: an agent's hook that never needs
# them should not pay for them (tests/agents/test_latency_imports.py).

def data_dir() -> Path:
    env = os.environ.get("HARNESS_DATA_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP))


def config_dir() -> Path:
    env = os.environ.get("HARNESS_CONFIG_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir(APP))


def codex_home() -> Path:
    """Codex CLI's own directory: ``$CODEX_HOME``, else ``~/.codex`` (its sessions and
    user-level hooks live there)."""
    home = os.environ.get("CODEX_HOME")
    return Path(home).expanduser() if home else Path.home() / ".codex"


def copilot_home() -> Path:
    """GitHub Copilot CLI's directory: ``$COPILOT_HOME``, else ``~/.copilot`` (its settings,
    user-level hooks and each session's state, ``session-state/<id>/``)."""
    home = os.environ.get("COPILOT_HOME")
    return Path(home).expanduser() if home else Path.home() / ".copilot"


def gemini_dir() -> Path:
    """Gemini CLI's user directory: ``$GEMINI_CLI_HOME/.gemini``, else ``~/.gemini`` (its
    user settings, trusted folders, saved chats and task trackers live there)."""
    home = os.environ.get("GEMINI_CLI_HOME")
    return (Path(home).expanduser() if home else Path.home()) / ".gemini"


@dataclass(frozen=True)
class Resolved:
    value: str
    how: str


def find_project_store(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        candidate = d / PROJECT_DIR / STORE_FILE
        if candidate.exists():
            return candidate
    return None


def resolve_store(db: str | None, cwd: Path | None = None) -> Resolved:
    if db:
        return Resolved(db, "--db")
    env = os.environ.get("HARNESS_DB")
    if env:
        return Resolved(env, "HARNESS_DB")
    project = find_project_store(cwd)
    if project is not None:
        return Resolved(str(project), f"{PROJECT_DIR}/ in {project.parent.parent}")
    return Resolved(str(data_dir() / STORE_FILE), DEFAULT_STORE_HOW)


def _sessions_file() -> Path:
    return config_dir() / "sessions.json"


def current_session(store_url: str) -> str | None:
    try:
        data = json.loads(_sessions_file().read_text())
    except (OSError, ValueError):
        return None
    value = data.get(store_url) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def set_current_session(store_url: str, name: str) -> None:
    path = _sessions_file()
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[store_url] = name
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".sessions-")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)


def resolve_session(explicit: str | None, store_url: str) -> Resolved:
    if explicit:
        return Resolved(explicit, "--session")
    env = os.environ.get("HARNESS_SESSION")
    if env:
        return Resolved(env, "HARNESS_SESSION")
    current = current_session(store_url)
    if current:
        return Resolved(current, "harness session use")
    return Resolved(DEFAULT_SESSION, "the default")
