"""Claude Code hooks: its todo calls go into the store, and the list comes back to it.

``harness hook claude-code`` gets one hook payload (JSON) on stdin, as Claude Code sends
it to a ``command`` hook:

* ``PostToolUse`` with ``tool_name`` ``TodoWrite``: ``tool_input`` is the whole list; it is
  merged like any agent write (:func:`harness.agent.todowrite`) with
  ``sees_response=False``, because Claude never reads a hook's answer: its next write is
  compared with what it sent, not with what we hold.
* ``PostToolUse`` with ``TaskCreate`` / ``TaskUpdate`` (Claude Code >= 2.1.16, the
  per-task tools): one item is created, changed or (status ``deleted``) removed. Claude's
  task ids are mapped to ours in an agent view of their own (key
  ``agent:claude-code/tasks``, format ``claude-tasks``), each as
  ``<claude session id>:<task id>``, since Claude numbers tasks from 1 in every session.
  A delivery seen twice does nothing the second time.
* ``SessionStart`` (``source`` startup, resume, clear or compact): prints the list as
  ``hookSpecificOutput.additionalContext``, which Claude Code adds to the model's context,
  so the list survives ``/compact``, ``/clear`` and a restart.

Everything else is ignored. A hook must never stand in the agent's way: the CLI command
catches every error, logs it to ``<data dir>/logs/hooks.log`` and exits 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from harness import formats
from harness.agent import prompt_block, todowrite
from harness.context import Harness
from harness.errors import InputError
from harness.formats import ViewItem
from harness.todos import reaches
from state.store import Tx

ACTOR = "agent:claude-code"
TASK_VIEW = ACTOR + "/tasks"
TASK_FORMAT = "claude-tasks"
TASK_STATUSES = ("pending", "in_progress", "completed")
TODO_TOOLS = ("TodoWrite", "TaskCreate", "TaskUpdate")


def handle(payload: Any, harness: Harness, *, actor: str = ACTOR) -> str | None:
    """Act on one hook payload; return what to print on stdout (None: nothing)."""
    if not isinstance(payload, Mapping):
        raise InputError(f"hook payload must be a JSON object, not {type(payload).__name__}")
    event = payload.get("hook_event_name")
    if event == "SessionStart":
        return session_start(harness)
    if event != "PostToolUse":
        return None
    tool = payload.get("tool_name")
    if tool not in TODO_TOOLS:
        return None
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, Mapping):
        raise InputError(f"{tool}: tool_input must be an object")
    ref = payload.get("tool_use_id") if isinstance(payload.get("tool_use_id"), str) else None
    sid = harness.session(create=True).id
    if tool == "TodoWrite":
        write = formats.parse(dict(tool_input), "claude", where="TodoWrite tool_input")
        todowrite(harness.store, sid, write, actor=actor, sees_response=False, ref=ref)
        return None
    claude_session = str(payload.get("session_id") or "")
    if tool == "TaskCreate":
        task_create(harness, sid, claude_session, tool_input, payload.get("tool_response"),
                    actor=actor, ref=ref)
    else:
        task_update(harness, sid, claude_session, tool_input, actor=actor, ref=ref)
    return None


def session_start(harness: Harness) -> str | None:
    sess = harness.session(create=True)
    todos = sorted(harness.store.todos(sess.id), key=lambda t: (t.position, t.num))
    if not todos:
        return None  # nothing to restore; say nothing rather than add noise
    block = prompt_block(todos, sess.name)
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart",
                                              "additionalContext": block}},
                      ensure_ascii=False)


# -- the per-task tools ---------------------------------------------------------------

def _task_map(tx: Tx) -> list[ViewItem]:
    view = tx.agent_view(TASK_VIEW)
    if not isinstance(view, dict) or not isinstance(view.get("items"), list):
        return []
    out = []
    for row in view["items"]:
        try:
            out.append(ViewItem(*row))
        except TypeError:
            continue  # a row we cannot read is a task we no longer know
    return out


def _save_map(tx: Tx, items: list[ViewItem]) -> None:
    # Tasks removed from the store (by a person, or by the agent's own TodoWrite) drop out.
    items = [v for v in items if v.num in tx.state.todos]
    tx.set_agent_view(TASK_VIEW, {"format": TASK_FORMAT, "items": items})


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


def task_create(harness: Harness, sid: int, claude_session: str, tool_input: Mapping[str, Any],
                response: Any, *, actor: str = ACTOR, ref: str | None = None) -> int | None:
    subject = _text(tool_input.get("subject"), "TaskCreate.subject")
    if not subject or not subject.strip():
        raise InputError("TaskCreate: missing subject")
    active = _text(tool_input.get("activeForm"), "TaskCreate.activeForm")
    description = _text(tool_input.get("description"), "TaskCreate.description")
    with harness.store.write(sid, actor, ref=ref) as tx:
        tasks = _task_map(tx)
        task_id = created_task_id(response)
        if task_id is None:
            # Claude numbers a session's tasks 1, 2, 3...: the next one is a safe guess.
            mine = [int(v.agent_id.rsplit(":", 1)[1]) for v in tasks if v.agent_id
                    and v.agent_id.startswith(claude_session + ":")
                    and v.agent_id.rsplit(":", 1)[1].isdigit()]
            task_id = str(max(mine, default=0) + 1)
        key = f"{claude_session}:{task_id}"
        if any(v.agent_id == key and v.num in tx.state.todos for v in tasks):
            return None  # the same call delivered twice
        todo = tx.create_todo(subject, active_form=active, origin="agent")
        if description and description.strip() and description.strip() != subject.strip():
            tx.emit("todo.noted", todo_id=todo.num, payload={"text": description})
        tasks.append(ViewItem(todo.num, subject, "pending", None, active, key))
        _save_map(tx, tasks)
        return todo.num


def task_update(harness: Harness, sid: int, claude_session: str, tool_input: Mapping[str, Any],
                *, actor: str = ACTOR, ref: str | None = None) -> int | None:
    task_id = tool_input.get("taskId", tool_input.get("task_id", tool_input.get("id")))
    if task_id is None:
        raise InputError("TaskUpdate: missing taskId")
    status = tool_input.get("status")
    if status is not None and status not in (*TASK_STATUSES, "deleted"):
        raise InputError(f"TaskUpdate.status: unknown status {status!r} (expected one of "
                         f"{', '.join((*TASK_STATUSES, 'deleted'))})")
    subject = _text(tool_input.get("subject"), "TaskUpdate.subject")
    active = _text(tool_input.get("activeForm"), "TaskUpdate.activeForm")
    description = _text(tool_input.get("description"), "TaskUpdate.description")
    key = f"{claude_session}:{task_id}"
    with harness.store.write(sid, actor, ref=ref) as tx:
        tasks = _task_map(tx)
        by_key = {v.agent_id: i for i, v in enumerate(tasks) if v.num in tx.state.todos}
        idx = by_key.get(key)
        if idx is None:
            raise InputError(f"TaskUpdate: task {task_id!r} of Claude session "
                             f"{claude_session or '?'} was never seen (hook installed "
                             "after it was created?); skipped")
        item = tasks[idx]
        assert item.num is not None
        todo = tx.todo(item.num)
        if status == "deleted":
            tx.remove_todo(item.num, reason=f"deleted by {actor} (TaskUpdate)")
            del tasks[idx]
            _save_map(tx, tasks)
            return item.num
        changes: dict[str, Any] = {}
        # A status Claude did not change keeps ours, whoever set it; a blocked item is
        # moved on only by starting or finishing it (harness/merge.py's rules).
        if (status is not None and status != item.status
                and not (todo.status == "blocked" and status == "pending")):
            changes["status"] = status
            if todo.status == "blocked":
                changes["blocked_reason"] = None
        if subject is not None and subject.strip() and subject != item.content:
            changes["content"] = subject
        if active is not None and active != item.active_form:
            changes["active_form"] = active
        # Dependencies that would make a cycle are dropped: nothing could ever start.
        deps = [d for d in _dependencies(tasks, claude_session, tool_input)
                if d != item.num and not reaches(tx, [d], item.num)]
        if deps:
            changes["depends_on"] = sorted({*todo.depends_on, *deps})
        tx.update_todo(item.num, **changes)
        for num in _dependents(tasks, claude_session, tool_input):
            if num != item.num and num in tx.state.todos and not reaches(tx, [item.num], num):
                other = tx.todo(num)
                tx.update_todo(num, depends_on=sorted({*other.depends_on, item.num}))
        if description and description.strip():
            tx.emit("todo.noted", todo_id=item.num, payload={"text": description})
        tasks[idx] = item._replace(status=status if status in TASK_STATUSES else item.status,
                                   content=subject if subject else item.content,
                                   active_form=active if active is not None
                                   else item.active_form)
        _save_map(tx, tasks)
        return item.num


def _nums(tasks: list[ViewItem], claude_session: str, ids: Any) -> list[int]:
    if not isinstance(ids, list):
        return []
    keys = {f"{claude_session}:{i}" for i in ids}
    return [v.num for v in tasks if v.agent_id in keys and v.num is not None]


def _dependencies(tasks: list[ViewItem], claude_session: str,
                  tool_input: Mapping[str, Any]) -> list[int]:
    return _nums(tasks, claude_session, tool_input.get("addBlockedBy"))


def _dependents(tasks: list[ViewItem], claude_session: str,
                tool_input: Mapping[str, Any]) -> list[int]:
    return _nums(tasks, claude_session, tool_input.get("addBlocks"))

