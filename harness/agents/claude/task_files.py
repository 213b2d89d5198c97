"""People's changes written back into Claude Code's own task files.

Claude Code keeps each task of a list in ``<config>/tasks/<list id>/<task id>.json``
(``<config>`` is ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``), and its ``TaskList`` and
``TaskGet`` read those files afresh on every call (Claude Code 2.1.197, seen in
tests/agents/real/test_claude_code.py). So a person's change to a todo that is one of
Claude's tasks reaches the agent by being written into that task's file:
:func:`write_back_now` does so right after a person's change (``harness done``, ``edit``,
``block``, the TUI: :mod:`harness.todos`), and :func:`write_back` again from the
``PreToolUse`` hook of ``TaskList`` and ``TaskGet`` (before Claude reads the file) and
from ``UserPromptSubmit``, which also catches the runner's changes. (Not before ``TaskUpdate``:
it would double that call's hook time, and a file Claude rewrites meanwhile is written
again at the next ``TaskList``, since only Claude's own fields are compared.)

The rules:

* Only what someone else changed is written: a field is written when the file still says
  what Claude last told us (the task map, :mod:`harness.agents.claude.tasks`) and our todo
  says something else. A file Claude changed since (a call our hooks have not seen yet)
  is left alone: Claude's newer word wins, and its hook brings it to us.
* What a task can hold: the subject, the status (``blocked`` shows as ``pending``,
  ``cancelled`` as ``completed``; the hook's notice says which) and the ``activeForm``.
  Priority has no place in a task; the notice tells it.
* Files are written whole, beside themselves, and renamed into place: Claude never reads
  half a file. A file is never created and never deleted: a task whose file Claude Code
  dropped (it drops completed tasks, claude-code #78147) stays in our store, and
  ``harness show`` says its file is gone (:func:`task_of`).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.agents.claude.tasks import TASK_VIEW, load_map, save_map
from harness.formats import ViewItem
from state.store import Store, Tx

# Our status as a Claude task's status (a task has no blocked or cancelled).
CLAUDE_STATUS = {"pending": "pending", "in_progress": "in_progress", "completed": "completed",
                 "blocked": "pending", "cancelled": "completed"}
MAX_TASK_BYTES = 1 << 20


def config_dir() -> Path:
    raw = os.environ.get("CLAUDE_CONFIG_DIR", "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".claude"


def task_dir(list_id: str) -> Path:
    return config_dir() / "tasks" / list_id


def _read(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > MAX_TASK_BYTES:
            return None
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None  # gone, unreadable, or Claude is writing it: not ours to touch now
    return obj if isinstance(obj, dict) else None


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """``obj`` as ``path``, whole: written beside it and renamed into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False)
        try:
            os.chmod(tmp, path.stat().st_mode & 0o777)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_back(tx: Tx, list_id: str) -> list[str]:
    """Write what others changed in the todos of Claude's task list ``list_id`` into its
    task files (see the module doc); the map is updated in ``tx``. Returns the task ids
    written."""
    if not list_id:
        return []
    directory = task_dir(list_id)
    if not directory.is_dir():
        return []
    tasks = load_map(tx)
    written: list[str] = []
    changed = False
    for i, item in enumerate(tasks):
        if not item.agent_id or not item.agent_id.startswith(list_id + ":"):
            continue
        todo = tx.state.todos.get(item.num) if item.num is not None else None
        if todo is None:
            continue  # removed here: the notice says so; Claude's file stays Claude's
        task_id = item.agent_id.rsplit(":", 1)[1]
        path = directory / f"{task_id}.json"
        obj = _read(path)
        if obj is None:
            continue
        update = _update(obj, item, todo.content, CLAUDE_STATUS.get(todo.status, "pending"),
                         todo.active_form)
        if not update:
            continue
        write_json(path, {**obj, **update})
        written.append(task_id)
        tasks[i] = item._replace(content=update.get("subject", item.content),
                                 status=update.get("status", item.status),
                                 active_form=update.get("activeForm", item.active_form))
        changed = True
    if changed:
        save_map(tx, tasks)
    return written


def write_back_now(store: Store, session_id: int, actor: str) -> list[str]:
    """:func:`write_back` for every Claude task list of the session, in a transaction of
    its own: called right after a person's (or another agent's) change, so Claude Code's
    files (and its task panel) show it at once. The ``PreToolUse`` hook does the same
    before Claude reads them, so a file this cannot write (another user's config
    directory, a full disk) is only late, never wrong."""
    view = store.agent_view(session_id, TASK_VIEW)
    rows = view.get("items") if isinstance(view, dict) else None
    lists = sorted({row[5].rsplit(":", 1)[0] for row in rows if isinstance(row, list)
                    and len(row) > 5 and isinstance(row[5], str) and ":" in row[5]}
                   if isinstance(rows, list) else ())
    lists = [name for name in lists if task_dir(name).is_dir()]
    if not lists:
        return []
    try:
        with store.write(session_id, actor) as tx:
            return [tid for name in lists for tid in write_back(tx, name)]
    except OSError:
        return []


def _update(obj: dict[str, Any], item: ViewItem, subject: str, status: str,
            active: str | None) -> dict[str, Any]:
    """The fields to write: those the file still has as Claude last said them, and that
    our todo now says otherwise."""
    out: dict[str, Any] = {}
    for key, last, now in (("subject", item.content, subject), ("status", item.status, status),
                           ("activeForm", item.active_form, active)):
        if now is None or obj.get(key) != last or last == now:
            continue
        out[key] = now
    return out


@dataclass(frozen=True)
class TaskLink:
    """Which of Claude's tasks a todo is, and whether its file is still there."""

    list_id: str
    task_id: str
    path: Path
    dropped: bool  # the list's directory is there, the task's file is not


def task_of(store: Store, session_id: int, num: int) -> TaskLink | None:
    """The Claude task todo ``num`` is (None: it is none of Claude's tasks)."""
    view = store.agent_view(session_id, TASK_VIEW)
    rows = view.get("items") if isinstance(view, dict) else None
    for row in rows if isinstance(rows, list) else []:
        try:
            item = ViewItem(*row)
        except TypeError:
            continue
        if item.num == num and item.agent_id and ":" in item.agent_id:
            list_id, task_id = item.agent_id.rsplit(":", 1)
            directory = task_dir(list_id)
            path = directory / f"{task_id}.json"
            return TaskLink(list_id, task_id, path,
                            dropped=directory.is_dir() and not path.exists())
    return None
