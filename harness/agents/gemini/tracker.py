"""Gemini CLI's task tracker (``experimental.taskTracker``): its tasks are our todos.

With the tracker on, Gemini CLI offers the model six tools, and keeps one JSON file per
task under ``<project temp dir>/<Gemini session id>/tracker/<id>.json`` (ids are 6 hex
digits, random per task). Three of them change the list; what each answers (the text the
model reads back, ``llmContent``) says what it did:

* ``tracker_create_task {title, description, type, parentId?, dependencies?}``:
  ``Created task 929ca3: <title>``;
* ``tracker_update_task {id, title?, description?, status?, dependencies?}``
  (``dependencies`` is the task's whole new list): ``Updated task 929ca3. Status: ...``;
* ``tracker_add_dependency {taskId, dependencyId}``: ``Linked 929ca3 -> 5e1f0a.``

``tracker_get_task``, ``tracker_list_tasks`` and ``tracker_visualize`` only read. A call
the tool refused (an unknown id, a task closed before its dependencies) changed nothing
and is skipped.

Statuses: ``open`` is our ``pending``, ``closed`` our ``completed``; ``in_progress`` and
``blocked`` are the same. Dependencies are our ``depends_on`` (one that would make a
cycle is dropped); a parent (``parentId``) has no place in the store. The hook
(:mod:`harness.agents.gemini.hooks`) and the importer (:mod:`harness.agents.gemini.transcript`) apply
calls with :func:`apply`, so a live session and an imported one make the same events.

Tracker ids are mapped to our todos in an agent view of their own
(:data:`TRACKER_VIEW`), like Claude Code's task ids (:mod:`harness.agents.claude.tasks`):
each row is a todo with ``<Gemini session id>:<task id>`` and the task as Gemini last
said it was, which is what the merge compares the next call with. A resumed Gemini
session keeps its id and its tracker; a new one starts with an empty tracker, and a task
it creates with the text of a stored todo takes that todo up rather than doubling it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness.agents.agent_write import TodoEdit
from harness.agents.agent_write import apply as apply_write
from harness.agents.claude.tasks import create_task, load_map, note_description, save_map
from harness.errors import InputError
from harness.formats import CLAUDE_TASKS, ViewItem
from harness.merge import normalize
from state.store import Tx

TRACKER_VIEW = "agent:gemini-cli/tracker"
TRACKER_FORMAT = "gemini-tracker"
CREATE, UPDATE, LINK = "tracker_create_task", "tracker_update_task", "tracker_add_dependency"
WRITE_TOOLS = (CREATE, UPDATE, LINK)
READ_TOOLS = ("tracker_get_task", "tracker_list_tasks", "tracker_visualize")
STATUS = {"open": "pending", "in_progress": "in_progress", "blocked": "blocked",
          "closed": "completed"}
# Ours in the tracker's words (a cancelled todo is closed: the agent must not start it).
TRACKER_STATUS = {"pending": "open", "in_progress": "in_progress", "blocked": "blocked",
                  "completed": "closed", "cancelled": "closed"}
_CREATED = re.compile(r"^Created task ([0-9A-Za-z]+):")
_UPDATED = re.compile(r"^Updated task ([0-9A-Za-z]+)\b")
_LINKED = re.compile(r"^Linked ([0-9A-Za-z]+) -> ([0-9A-Za-z]+)\.")


def _texts(args: Mapping[str, Any], tool: str, *names: str) -> list[str | None]:
    """The text arguments ``names`` of a call (None where absent)."""
    out = []
    for name in names:
        value = args.get(name)
        if value is not None and not isinstance(value, str):
            raise InputError(f"{tool}.{name} must be text, not {type(value).__name__}")
        out.append(value)
    return out


def _ids(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{name} must be a list of task ids")
    return value


def apply(tx: Tx, tool: str, args: Mapping[str, Any], result: str, gemini_session: str, *,
          ts: str | None = None, ref: str | None = None) -> int | None:
    """One tracker call that Gemini CLI carried out (``result`` is what the tool told the
    model), inside the caller's write transaction. Returns the todo it changed (None: a
    call that changed nothing here, such as one the tool refused)."""
    if tool == CREATE:
        m = _CREATED.match(result)
        return _create(tx, args, m.group(1), gemini_session, ts=ts, ref=ref) if m else None
    if tool == UPDATE:
        m = _UPDATED.match(result)
        return _update(tx, args, m.group(1), gemini_session, ts=ts, ref=ref) if m else None
    if tool == LINK:
        m = _LINKED.match(result)
        return _link(tx, m.group(1), m.group(2), gemini_session, ts=ts, ref=ref) if m else None
    return None


def _key(gemini_session: str, task_id: str) -> str:
    return f"{gemini_session}:{task_id}"


def _find(tasks: list[ViewItem], tx: Tx, key: str) -> int | None:
    for i, v in enumerate(tasks):
        if v.agent_id == key and v.num in tx.state.todos:
            return i
    return None


def _nums(tasks: list[ViewItem], tx: Tx, gemini_session: str, ids: list[str]) -> list[int]:
    found = (_find(tasks, tx, _key(gemini_session, i)) for i in ids)
    return [tasks[i].num for i in found if i is not None and tasks[i].num is not None]


def _save(tx: Tx, tasks: list[ViewItem]) -> None:
    save_map(tx, tasks, TRACKER_VIEW, TRACKER_FORMAT)


def _create(tx: Tx, args: Mapping[str, Any], task_id: str, gemini_session: str, *,
            ts: str | None, ref: str | None) -> int | None:
    title, description = _texts(args, CREATE, "title", "description")
    if not title or not title.strip():
        raise InputError(f"{CREATE}: missing title")
    deps = _ids(args.get("dependencies"), f"{CREATE}.dependencies")
    tasks = load_map(tx, TRACKER_VIEW)
    key = _key(gemini_session, task_id)
    if _find(tasks, tx, key) is not None:
        return None  # the same call delivered twice
    num = _take_up(tx, tasks, title, gemini_session)
    if num is None:
        num = create_task(tx, tasks, key, title, description=description, ts=ts, ref=ref,
                          view_key=TRACKER_VIEW, fmt=TRACKER_FORMAT)
        assert num is not None
    else:
        tasks.append(ViewItem(num, title, "pending", None, None, key))
        note_description(tx, num, title, description, ts=ts, ref=ref)
        _save(tx, tasks)
    add_deps(tx, num, _nums(tasks, tx, gemini_session, deps), ts=ts, ref=ref)
    return num


def _take_up(tx: Tx, tasks: list[ViewItem], title: str, gemini_session: str) -> int | None:
    """A stored todo with this text that no task of this Gemini session stands for: a new
    session re-creating what it was shown after a restart."""
    mine = {v.num for v in tasks if v.agent_id and v.agent_id.startswith(gemini_session + ":")}
    want = normalize(title)
    for t in sorted(tx.state.todos.values(), key=lambda t: (t.position, t.num)):
        if t.num not in mine and normalize(t.content) == want:
            return t.num
    return None


def _edit(tx: Tx, num: int, changes: Mapping[str, Any], *, ts: str | None,
          ref: str | None) -> None:
    # Merged here already (the tracker's own rule), so it goes through the route of every
    # agent write as plain fields.
    apply_write(tx, [TodoEdit(num, fields=changes)], caps=CLAUDE_TASKS, ts=ts, ref=ref)


def add_deps(tx: Tx, num: int, deps: list[int], *, ts: str | None, ref: str | None,
              drop: frozenset[int] = frozenset()) -> None:
    """``num`` now depends on ``deps`` too (and no longer on ``drop``, nor on a todo that
    is gone); a dependency that would close a cycle is dropped: nothing on it could ever
    start."""
    from harness.todos import reaches

    todo = tx.todo(num)
    # A dependency on a todo that is gone (removed since) goes too.
    keep = [d for d in todo.depends_on if d not in drop and d in tx.state.todos]
    new = [d for d in deps if d != num and d not in keep and not reaches(tx, [d], num)]
    if new or len(keep) != len(todo.depends_on):
        _edit(tx, num, {"depends_on": sorted({*keep, *new})}, ts=ts, ref=ref)


def _update(tx: Tx, args: Mapping[str, Any], task_id: str, gemini_session: str, *,
            ts: str | None, ref: str | None) -> int | None:
    status = args.get("status")
    if status is not None and status not in STATUS:
        raise InputError(f"{UPDATE}.status: unknown status {status!r} (expected one of "
                         f"{', '.join(STATUS)})")
    title, description = _texts(args, UPDATE, "title", "description")
    deps = args.get("dependencies")
    dep_ids = _ids(deps, f"{UPDATE}.dependencies")  # checked before anything changes
    tasks = load_map(tx, TRACKER_VIEW)
    idx = _find(tasks, tx, _key(gemini_session, task_id))
    if idx is None:
        raise InputError(f"{UPDATE}: task {task_id!r} of Gemini session {gemini_session} "
                         "was never seen (hook installed after it was created?); skipped")
    item = tasks[idx]
    assert item.num is not None
    todo = tx.todo(item.num)
    changes: dict[str, Any] = {}
    ours = STATUS.get(status) if status else None
    # A status Gemini did not change keeps ours, whoever set it (harness/merge.py's rule).
    if ours is not None and ours != item.status and ours != todo.status:
        changes["status"] = ours
        if todo.status == "blocked":
            changes["blocked_reason"] = None
    if title is not None and title.strip() and title != item.content \
            and title != todo.content:
        changes["content"] = title
    if changes:
        _edit(tx, item.num, changes, ts=ts, ref=ref)
    if deps is not None:
        # The task's whole list: the agent drops only dependencies on its own tasks; one a
        # person added to another todo stays.
        own = frozenset(v.num for v in tasks if v.num is not None
                        and v.agent_id and v.agent_id.startswith(gemini_session + ":"))
        wanted = _nums(tasks, tx, gemini_session, dep_ids)
        add_deps(tx, item.num, wanted, ts=ts, ref=ref, drop=own - set(wanted))
    if description is not None:
        note_description(tx, item.num, title or item.content, description, ts=ts, ref=ref)
    tasks[idx] = item._replace(status=ours or item.status, content=title or item.content)
    _save(tx, tasks)
    return item.num


def _link(tx: Tx, task_id: str, dep_id: str, gemini_session: str, *, ts: str | None,
          ref: str | None) -> int | None:
    tasks = load_map(tx, TRACKER_VIEW)
    nums = _nums(tasks, tx, gemini_session, [task_id, dep_id])
    if len(nums) != 2:
        raise InputError(f"{LINK}: task {task_id!r} or {dep_id!r} of Gemini session "
                         f"{gemini_session} was never seen; skipped")
    add_deps(tx, nums[0], [nums[1]], ts=ts, ref=ref)
    return nums[0]
