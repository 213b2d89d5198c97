"""Where an agent's todo write meets the store: one route for every shape of agent write.

An agent changes its list in one of two shapes. The whole list at once (``todowrite`` over
the CLI or MCP, Claude Code's ``TodoWrite``, Codex's and Gemini CLI's plans, the
importers): :func:`harness.agents.todolist.apply_write` merges it into a
:class:`harness.merge.Plan`. Or one task at a time (Claude Code's ``TaskCreate`` and
``TaskUpdate`` and its ``TaskCreated``/``TaskCompleted`` events, :mod:`harness.agents.claude.hooks`
and :mod:`harness.agents.claude.tasks`). Either way the change reaches the store here, as
typed steps given to :func:`apply`, under the same rules:

* the writer is the transaction's actor, and a removal's reason names it;
* an item the agent creates has the origin ``agent`` (an import passes its own);
* what the agent says of a todo is merged against the todo as the agent last knew it
  (:func:`harness.merge.field_changes`, the rule a whole-list plan uses for each item): a
  field it did not change keeps ours, whoever set it; a format that cannot say
  ``blocked`` or ``cancelled`` does not undo either by resending ``pending``, nor turns a
  cancelled item (which reads as completed to it) into a completed one;
* a task's description becomes a ``todo.noted`` event;
* a step that changes nothing writes no event;
* the view the agent now holds (the base of its next merge, or for the task tools the map
  of its task ids) is recorded with :func:`record_view`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.formats import Capabilities, Item, ViewItem
from harness.merge import field_changes
from state.store import Tx


@dataclass(frozen=True)
class NewTodo:
    """An item the agent adds."""

    content: str
    status: str = "pending"
    priority: str = "medium"
    active_form: str | None = None
    position: float | None = None  # None: after every other item
    # A task's description: noted when it says more than the content.
    description: str | None = None


@dataclass(frozen=True)
class TodoEdit:
    """The agent's word on one todo."""

    num: int
    # What the agent says the todo now is, merged against ``base`` (field_changes).
    said: Item | None = None
    base: ViewItem | None = None  # the todo as the agent last knew it; None: none
    # Changes applied as they are: a whole-list plan's (merged already), or what no
    # agent format says field by field (dependencies, a late activeForm).
    fields: Mapping[str, Any] = field(default_factory=dict)
    note: str | None = None  # noted when not blank


@dataclass(frozen=True)
class TodoRemoval:
    """A todo the agent drops; ``reason`` may name the agent as ``{actor}``."""

    num: int
    reason: str


Step = NewTodo | TodoEdit | TodoRemoval


@dataclass
class Applied:
    created: list[int] = field(default_factory=list)  # each NewTodo's num, in order
    changed: dict[int, dict[str, list[Any]]] = field(default_factory=dict)  # num -> diff


def says_more(description: str | None, content: str) -> bool:
    """Whether a task's description is worth a note: it says more than the subject."""
    return bool(description and description.strip() and description.strip() != content.strip())


def apply(tx: Tx, steps: Sequence[Step], *, caps: Capabilities, origin: str = "agent",
          ts: str | None = None, ref: str | None = None) -> Applied:
    """Apply an agent's ``steps`` in order, as ``tx.actor``, by the rules of the module
    doc; ``caps`` is what the agent's format can say (for merging a ``TodoEdit.said``)."""
    out = Applied()
    for step in steps:
        if isinstance(step, TodoRemoval):
            tx.remove_todo(step.num, reason=step.reason.format(actor=tx.actor), ts=ts, ref=ref)
        elif isinstance(step, NewTodo):
            t = tx.create_todo(step.content, status=step.status, priority=step.priority,
                               active_form=step.active_form, position=step.position,
                               origin=origin, ts=ts, ref=ref)
            out.created.append(t.num)
            if says_more(step.description, step.content):
                tx.emit("todo.noted", todo_id=t.num, ts=ts, ref=ref,
                        payload={"text": step.description})
        else:
            changes = dict(step.fields)
            if step.said is not None:
                changes = {**field_changes(tx.todo(step.num), step.base, step.said, caps),
                           **changes}
            if changes:
                out.changed[step.num] = tx.update_todo(step.num, ts=ts, ref=ref, **changes)
            if step.note and step.note.strip():
                tx.emit("todo.noted", todo_id=step.num, ts=ts, ref=ref,
                        payload={"text": step.note})
    return out


def record_view(tx: Tx, key: str, view: Any, *, ts: str | None = None) -> None:
    """The view the agent now holds, under ``key`` (its actor, or a map of its own such
    as ``agent:claude-code/tasks``): what its next write is merged against."""
    tx.set_agent_view(key, view, ts=ts)
