"""Claude Code's task ids and our todos: the map that makes one list of what Claude Code's
hooks report (:mod:`harness.agents.claude.hooks`) and what its task directories hold
(:mod:`harness.agents.claude.task_list`).

The map is an agent view of its own (key ``agent:claude-code/tasks``): a list of
:class:`~harness.formats.ViewItem` rows, each a todo of ours with Claude's key for it,
``<task list>:<task id>``, and the task as Claude last said it was. Both callers read it,
change it and save it inside their own write transaction; every change to a todo goes
through :func:`harness.agents.agent_write.apply`, the route of every agent write.

Gemini CLI's tracker tasks are mapped the same way, in a view of their own
(:mod:`harness.agents.gemini.tracker` passes its ``view`` and ``fmt``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.agents.agent_write import NewTodo, TodoEdit, apply, record_view, says_more
from harness.agents.notice import Labeler, positions
from harness.formats import CLAUDE_TASKS, Item, ViewItem
from harness.merge import field_changes
from state.fold import TodoState
from state.store import Tx

TASK_VIEW = "agent:claude-code/tasks"
TASK_FORMAT = "claude-tasks"
TASK_STATUSES = ("pending", "in_progress", "completed")


def load_map(tx: Tx, view_key: str = TASK_VIEW) -> list[ViewItem]:
    view = tx.agent_view(view_key)
    if not isinstance(view, dict) or not isinstance(view.get("items"), list):
        return []
    out = []
    for row in view["items"]:
        try:
            out.append(ViewItem(*row))
        except TypeError:
            continue  # a row we cannot read is a task we no longer know
    return out


def task_labels(get_view: Callable[[str], Any], actor: str, *, view_key: str = TASK_VIEW,
                prefix: str = "#") -> Labeler:
    """How Claude knows a todo, for a notice (:mod:`harness.agents.notice`): ``#3``, its
    task 3 (the id ``TaskList`` shows and ``TaskUpdate`` takes), else ``item 2``, its place
    in the list Claude's last ``TodoWrite`` sent. Both views are read on the first call.
    (Gemini CLI's tracker passes its own map, ``view_key``, and names a task ``task
    929ca3``; a todo mapped in several sessions takes the latest mapping.)"""
    tasks: dict[int, str] | None = None
    in_list = positions(get_view, actor, "item")

    def label(num: int) -> str | None:
        nonlocal tasks
        if tasks is None:
            view = get_view(view_key)
            rows = view.get("items") if isinstance(view, dict) else None
            tasks = {}
            for row in rows if isinstance(rows, list) else []:
                if (isinstance(row, list) and len(row) > 5 and isinstance(row[0], int)
                        and isinstance(row[5], str) and ":" in row[5]):
                    tasks[row[0]] = prefix + row[5].rsplit(":", 1)[1]
        return tasks.get(num) or in_list(num)

    return label


def save_map(tx: Tx, items: list[ViewItem], view_key: str = TASK_VIEW,
             fmt: str = TASK_FORMAT) -> None:
    # Tasks removed from the store (by a person, or by the agent's own TodoWrite) drop out.
    items = [v for v in items if v.num in tx.state.todos]
    record_view(tx, view_key, {"format": fmt, "items": items})


def create_task(tx: Tx, tasks: list[ViewItem], key: str, subject: str, *,
                active_form: str | None = None, description: str | None = None,
                status: str = "pending", ts: str | None = None, ref: str | None = None,
                view_key: str = TASK_VIEW, fmt: str = TASK_FORMAT) -> int | None:
    """A todo for Claude's task ``key``, added to ``tasks`` and the saved map; its
    description, when it says more than the subject, becomes a note. None: the map has
    that task already (one task delivered twice: TaskCreated, then PostToolUse)."""
    if any(v.agent_id == key and v.num in tx.state.todos for v in tasks):
        return None
    [num] = apply(tx, [NewTodo(subject, status=status, active_form=active_form,
                               description=description)],
                  caps=CLAUDE_TASKS, ts=ts, ref=ref).created
    tasks.append(ViewItem(num, subject, status, None, active_form, key))
    save_map(tx, tasks, view_key, fmt)
    return num


def note_description(tx: Tx, num: int, subject: str, description: str | None, *,
                     ts: str | None = None, ref: str | None = None) -> None:
    """A task's description is a note on its todo, when it says more than the subject."""
    if says_more(description, subject):
        apply(tx, [TodoEdit(num, note=description)], caps=CLAUDE_TASKS, ts=ts, ref=ref)


def status_change(todo: TodoState, item: ViewItem, status: str | None) -> dict[str, Any]:
    """Claude's status for a task as a change to its todo, by the rule of every agent
    write (:func:`harness.merge.field_changes`): a status Claude did not change keeps
    ours, whoever set it; a blocked todo is moved on only by starting or finishing it,
    and then loses its reason; a cancelled one is not undone by ``pending``."""
    if status is None:
        return {}
    return field_changes(todo, item, Item(item.content, status), CLAUDE_TASKS)
