"""Claude Code hooks: its todo calls go into the store, its context cuts into the history,
and the list comes back to it after every cut.

``harness hook claude-code`` gets one hook payload (JSON) on stdin, as Claude Code sends
it to a ``command`` hook (every payload has ``session_id``, ``transcript_path``, ``cwd``
and ``hook_event_name``):

* ``PostToolUse`` of ``TodoWrite``: ``tool_input`` is the whole list; it is merged like
  any agent write (:func:`harness.agents.todolist.todowrite`) with ``sees_response=False``,
  because Claude never reads the list back from a hook's answer.
* ``PostToolUse`` of ``TaskCreate`` / ``TaskUpdate`` (Claude Code's per-task tools), and
  the ``TaskCreated`` / ``TaskCompleted`` events (``task_id``, ``task_subject``,
  ``task_description``): one item is created, changed, completed or (status
  ``deleted``) removed. Claude's task ids are mapped to ours in an agent view of their
  own (key ``agent:claude-code/tasks``), each as ``<task list>:<task id>``: the list is
  ``CLAUDE_CODE_TASK_LIST_ID`` when set, else Claude's session id (Claude numbers the
  tasks of each list from 1). A task id a resumed or forked session inherited is found
  under the list it came from. A delivery seen twice (``TaskCreated`` and
  ``PostToolUse`` for one task) does nothing the second time.
* ``PreToolUse`` of ``TaskList`` / ``TaskGet``, and
  ``UserPromptSubmit``: what a person (or the runner) changed in the list's todos is
  written into Claude's task files first (:mod:`harness.agents.claude.task_files`), since
  Claude reads them afresh for those tools.
* Every ``PostToolUse`` we get (the todo tools, ``TaskList``, ``TaskGet``) and
  ``UserPromptSubmit`` answer with a short notice of what others changed since the agent
  last saw the list (:mod:`harness.agents.notice`) as ``additionalContext``; Claude Code
  puts it before the model's next turn. A ``SessionStart`` answer is the whole list, so
  it counts as seen.
* ``PreCompact``, ``PostCompact`` and ``SessionStart`` (``source`` ``startup``,
  ``resume``, ``clear``, ``compact``): each cut of Claude's context is one
  ``agent.context`` event in the session's history (``harness replay`` shows where the
  agent's memory was cut), and ``SessionStart`` answers with the list as
  ``hookSpecificOutput.additionalContext``, which Claude Code puts into the new context.
  When Claude Code's todo tools may be off (no ``CLAUDE_CODE_ENABLE_TODO_TOOLS`` in the
  hook's environment, which a settings file's ``env`` sets) and the harness MCP server is
  registered, the answer first tells the model to keep its plan with
  ``mcp__harness__todowrite``, loaded through ``ToolSearch`` when it is deferred
  (:func:`harness.agents.claude.install.mcp_hint`).

One harness session follows one piece of work across Claude's changing session ids
(:func:`session_for`): ``--session``, else ``CLAUDE_CODE_TASK_LIST_ID``, else
``HARNESS_SESSION``, else the project directory (``CLAUDE_PROJECT_DIR``, else the
payload's ``cwd``): with a project store there (``harness init``), its current session;
with a store elsewhere, a session named after the directory.

Everything else is ignored. A hook never stands in the agent's way: the CLI catches
every error, logs it to ``<data dir>/logs/hooks.log`` and exits 0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from harness.agents.agent_write import TodoEdit, TodoRemoval, apply
from harness.agents.claude.task_files import task_dir, write_back
from harness.agents.claude.tasks import (
    TASK_STATUSES,
    create_task,
    load_map,
    save_map,
    task_labels,
)
from harness.agents.context_cuts import (
    CONTEXT_EVENTS,
    agent_views,
    context_event,
    notice_answer,
)
from harness.agents.notice import Labeler
from harness.agents.seam import project_dir, project_session
from harness.context import Harness
from harness.errors import InputError
from harness.formats import CLAUDE_TASKS, Item, ViewItem
from state.store import Tx

ACTOR = "agent:claude-code"
TODO_TOOLS = ("TodoWrite", "TaskCreate", "TaskUpdate")
# Tools that show Claude its task list: before them the task files get people's changes
# (PreToolUse), after them the notice of what changed (PostToolUse).
LIST_TOOLS = ("TaskList", "TaskGet")
LIST_ENV = "CLAUDE_CODE_TASK_LIST_ID"


# -- which harness session ----------------------------------------------------------------

def session_for(payload: Any, explicit: str | None = None) -> str | None:
    """The harness session for this hook payload (None: the store's current one):
    ``--session``, then ``CLAUDE_CODE_TASK_LIST_ID`` (a list shared by several Claude
    sessions is one piece of work), then ``HARNESS_SESSION``, then the project directory
    (:func:`harness.agents.seam.project_session`)."""
    return project_session(payload, explicit, list_env=LIST_ENV)


def task_list(payload: Mapping[str, Any]) -> str:
    """The Claude task list a task id belongs to."""
    return os.environ.get(LIST_ENV, "").strip() or str(payload.get("session_id") or "")


# -- dispatch -----------------------------------------------------------------------------

def handle(payload: Any, harness: Harness, *, actor: str = ACTOR) -> str | None:
    """Act on one hook payload; return what to print on stdout (None: nothing)."""
    if not isinstance(payload, Mapping):
        raise InputError(f"hook payload must be a JSON object, not {type(payload).__name__}")
    event = payload.get("hook_event_name")
    if event in CONTEXT_EVENTS:
        hint = None
        if event == "SessionStart":
            from harness.agents.claude.install import mcp_hint

            hint = mcp_hint(os.environ, project_dir(payload))
        return context_event(harness, payload, actor=actor, tail=RESTORE_TAIL, hint=hint)
    if event == "TaskCreated":
        task_created(harness, payload, actor=actor)
        return None
    if event == "TaskCompleted":
        task_completed(harness, payload, actor=actor)
        return None
    if event == "PreToolUse":
        if payload.get("tool_name") in LIST_TOOLS:
            # Claude reads the task files next: a person's change must be in them.
            files_from_store(harness, payload, actor)
        return None
    if event == "UserPromptSubmit":
        files_from_store(harness, payload, actor)
        return told(harness, event, actor)
    if event != "PostToolUse":
        return None
    tool = payload.get("tool_name")
    if tool in LIST_TOOLS:
        return told(harness, event, actor)
    if tool not in TODO_TOOLS:
        return None
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, Mapping):
        raise InputError(f"{tool}: tool_input must be an object")
    ref = payload.get("tool_use_id") if isinstance(payload.get("tool_use_id"), str) else None
    sid = harness.session(create=True).id
    if tool == "TodoWrite":
        from harness import formats
        from harness.agents.todolist import todowrite

        write = formats.parse(dict(tool_input), "claude", where="TodoWrite tool_input")
        todowrite(harness.store, sid, write, actor=actor, sees_response=False, ref=ref)
    elif tool == "TaskCreate":
        task_create(harness, sid, task_list(payload), tool_input,
                    payload.get("tool_response"), actor=actor, ref=ref)
    else:
        task_update(harness, sid, task_list(payload), tool_input, actor=actor, ref=ref)
    return told(harness, event, actor)


# -- people's changes, told (harness.agents.notice) -----------------------------------------

def told(harness: Harness, event: str, actor: str) -> str | None:
    """The notice as ``event``'s answer, each item named as Claude knows it."""
    return notice_answer(harness, event, actor, labels(harness, actor))


def labels(harness: Harness, actor: str = ACTOR) -> Labeler:
    """How Claude knows a todo: its task ``#N``, or its place in the list of its last
    ``TodoWrite``."""
    return task_labels(agent_views(harness), actor)


def files_from_store(harness: Harness, payload: Mapping[str, Any], actor: str) -> None:
    """People's changes into the task files of this payload's list (when it has any)."""
    list_id = task_list(payload)
    if list_id and task_dir(list_id).is_dir():
        with harness.store.write(harness.session(create=True).id, actor) as tx:
            write_back(tx, list_id)


# -- the list back after a cut (harness.agents.context_cuts) --------------------------------------

RESTORE_TAIL = ("Kept by todo-harness across compactions, clears and restarts; your "
                "TodoWrite and Task calls update it. Carry on from here.")


# -- the per-task tools ---------------------------------------------------------------

def _find(tasks: list[ViewItem], tx: Tx, list_id: str, task_id: str) -> int | None:
    """The index of Claude's task ``task_id`` of ``list_id`` in the map; a resumed or
    forked session's inherited task is found under the latest list that has that id."""
    live = [(i, v) for i, v in enumerate(tasks) if v.num in tx.state.todos and v.agent_id]
    for i, v in live:
        if v.agent_id == f"{list_id}:{task_id}":
            return i
    if any(v.agent_id and v.agent_id.startswith(list_id + ":") for _, v in live):
        return None  # this list has tasks of its own: an unknown id is unknown
    inherited = [i for i, v in live if v.agent_id and v.agent_id.rsplit(":", 1)[1] == task_id]
    return inherited[-1] if inherited else None


_TASK_ID_IN_TEXT = re.compile(r"Task #?(\w+)")


def created_task_id(response: Any) -> str | None:
    """Claude's id for a task it just created, from the tool's response in any shape seen:
    ``{task: {id}}``, ``{taskId}``, ``{id}``, or the text ``Task #3 created ...``."""
    if isinstance(response, Mapping):
        task = response.get("task")
        if isinstance(task, Mapping) and task.get("id") is not None:
            return str(task["id"])
        for key in ("taskId", "task_id", "id"):
            if response.get(key) is not None:
                return str(response[key])
        for key in ("content", "text", "message", "result"):
            if key in response:
                return created_task_id(response[key])
        return None
    if isinstance(response, list):
        for block in response:
            found = created_task_id(block.get("text") if isinstance(block, Mapping) else block)
            if found:
                return found
        return None
    if isinstance(response, str):
        m = _TASK_ID_IN_TEXT.search(response)
        return m.group(1) if m else None
    return None


def _text(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"{name} must be text, not {type(value).__name__}")
    return value


def task_create(harness: Harness, sid: int, list_id: str, tool_input: Mapping[str, Any],
                response: Any, *, actor: str = ACTOR, ref: str | None = None) -> int | None:
    subject = _text(tool_input.get("subject"), "TaskCreate.subject")
    if not subject or not subject.strip():
        raise InputError("TaskCreate: missing subject")
    active = _text(tool_input.get("activeForm"), "TaskCreate.activeForm")
    description = _text(tool_input.get("description"), "TaskCreate.description")
    with harness.store.write(sid, actor, ref=ref) as tx:
        tasks = load_map(tx)
        task_id = created_task_id(response)
        if task_id is None:
            # Claude numbers a list's tasks 1, 2, 3...: the next one is a safe guess.
            mine = [int(v.agent_id.rsplit(":", 1)[1]) for v in tasks if v.agent_id
                    and v.agent_id.startswith(list_id + ":")
                    and v.agent_id.rsplit(":", 1)[1].isdigit()]
            task_id = str(max(mine, default=0) + 1)
        key = f"{list_id}:{task_id}"
        num = create_task(tx, tasks, key, subject, active_form=active,
                          description=description)
        if num is None and active:
            fill_active_form(tx, tasks, key, active)
        return num


def fill_active_form(tx: Tx, tasks: list[ViewItem], key: str, active: str) -> None:
    """Claude Code sends ``TaskCreated`` (no activeForm) before ``PostToolUse`` of
    ``TaskCreate`` (with it): the second delivery of one task still brings its activeForm,
    unless someone gave the todo one in between."""
    for i, v in enumerate(tasks):
        if v.agent_id == key and v.num in tx.state.todos:
            if v.active_form is None and tx.todo(v.num).active_form is None:
                apply(tx, [TodoEdit(v.num, fields={"active_form": active})],
                      caps=CLAUDE_TASKS)
                tasks[i] = v._replace(active_form=active)
                save_map(tx, tasks)
            return


def _event_task(payload: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    task_id = payload.get("task_id")
    if task_id is None or str(task_id).strip() == "":
        raise InputError(f"{payload.get('hook_event_name')}: missing task_id")
    return (str(task_id), _text(payload.get("task_subject"), "task_subject"),
            _text(payload.get("task_description"), "task_description"))


def task_created(harness: Harness, payload: Mapping[str, Any], *,
                 actor: str = ACTOR) -> int | None:
    """``TaskCreated``: Claude is creating task ``task_id`` (fires before PostToolUse)."""
    task_id, subject, description = _event_task(payload)
    if not subject or not subject.strip():
        raise InputError("TaskCreated: missing task_subject")
    sid = harness.session(create=True).id
    with harness.store.write(sid, actor) as tx:
        return create_task(tx, load_map(tx), f"{task_list(payload)}:{task_id}", subject,
                           description=description)


def task_completed(harness: Harness, payload: Mapping[str, Any], *,
                   actor: str = ACTOR) -> int | None:
    """``TaskCompleted``: task ``task_id`` is marked completed (by this agent or a
    teammate). A task we never saw is recorded, completed."""
    task_id, subject, description = _event_task(payload)
    list_id = task_list(payload)
    sid = harness.session(create=True).id
    with harness.store.write(sid, actor) as tx:
        tasks = load_map(tx)
        idx = _find(tasks, tx, list_id, task_id)
        if idx is None:
            if not subject or not subject.strip():
                raise InputError(f"TaskCompleted: task {task_id!r} was never seen and has "
                                 "no task_subject")
            return create_task(tx, tasks, f"{list_id}:{task_id}", subject,
                               description=description, status="completed")
        item = tasks[idx]
        assert item.num is not None
        # An event, not a word against Claude's last one: no base, whatever the map says.
        apply(tx, [TodoEdit(item.num, said=Item(tx.todo(item.num).content, "completed"))],
              caps=CLAUDE_TASKS)
        tasks[idx] = item._replace(status="completed")
        save_map(tx, tasks)
        return item.num


def task_update(harness: Harness, sid: int, list_id: str, tool_input: Mapping[str, Any],
                *, actor: str = ACTOR, ref: str | None = None) -> int | None:
    from harness.todos import reaches

    task_id = tool_input.get("taskId", tool_input.get("task_id", tool_input.get("id")))
    if task_id is None:
        raise InputError("TaskUpdate: missing taskId")
    task_id = str(task_id).lstrip("#")
    status = tool_input.get("status")
    if status is not None and status not in (*TASK_STATUSES, "deleted"):
        raise InputError(f"TaskUpdate.status: unknown status {status!r} (expected one of "
                         f"{', '.join((*TASK_STATUSES, 'deleted'))})")
    subject = _text(tool_input.get("subject"), "TaskUpdate.subject")
    active = _text(tool_input.get("activeForm"), "TaskUpdate.activeForm")
    description = _text(tool_input.get("description"), "TaskUpdate.description")
    with harness.store.write(sid, actor, ref=ref) as tx:
        tasks = load_map(tx)
        idx = _find(tasks, tx, list_id, task_id)
        if idx is None:
            raise InputError(f"TaskUpdate: task {task_id!r} of Claude task list "
                             f"{list_id or '?'} was never seen (hook installed after it "
                             "was created?); skipped")
        item = tasks[idx]
        assert item.num is not None
        todo = tx.todo(item.num)
        if status == "deleted":
            apply(tx, [TodoRemoval(item.num, "deleted by {actor} (TaskUpdate)")],
                  caps=CLAUDE_TASKS)
            del tasks[idx]
            save_map(tx, tasks)
            return item.num
        said = Item(subject if subject is not None and subject.strip() else item.content,
                    status or item.status, None, active)
        # Dependencies that would make a cycle are dropped: nothing could ever start.
        deps = [d for d in _nums(tasks, tx, list_id, tool_input.get("addBlockedBy"))
                if d != item.num and not reaches(tx, [d], item.num)]
        fields = {"depends_on": sorted({*todo.depends_on, *deps})} if deps else {}
        apply(tx, [TodoEdit(item.num, said=said, base=item, fields=fields)],
              caps=CLAUDE_TASKS)
        blocks = [TodoEdit(num, fields={"depends_on": sorted({*tx.todo(num).depends_on,
                                                              item.num})})
                  for num in _nums(tasks, tx, list_id, tool_input.get("addBlocks"))
                  if num != item.num and num in tx.state.todos
                  and not reaches(tx, [item.num], num)]
        apply(tx, [*blocks, TodoEdit(item.num, note=description)], caps=CLAUDE_TASKS)
        tasks[idx] = item._replace(status=status if status in TASK_STATUSES else item.status,
                                   content=subject if subject else item.content,
                                   active_form=active if active is not None
                                   else item.active_form)
        save_map(tx, tasks)
        return item.num


def _nums(tasks: list[ViewItem], tx: Tx, list_id: str, ids: Any) -> list[int]:
    if not isinstance(ids, list):
        return []
    found = (_find(tasks, tx, list_id, str(i).lstrip("#")) for i in ids)
    return [tasks[i].num for i in found if i is not None and tasks[i].num is not None]
