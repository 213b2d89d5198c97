"""An agent's todo write and read: the hot path of the store.

``todowrite`` merges a full list from an agent (see :mod:`harness.merge`) in one write
transaction and answers with the resulting list in the agent's own format, plus notes on
what others changed since the agent last looked. ``todoread`` renders the list for an
agent, including the compact ``prompt`` block for putting back into a context after
compaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from harness.formats import AgentWrite, Capabilities, ViewItem, caps_named, render_list
from harness.merge import Plan, others_changes, plan, sent_view, view_of
from harness.render import safe_line
from state.fold import TodoState, unmet_dependencies
from state.store import Store, Tx


@dataclass
class WriteResult:
    caps: Capabilities
    todos: list[TodoState]
    view: list[ViewItem]
    plan: Plan
    events: int
    notes: list[str] = field(default_factory=list)

    def response(self) -> dict[str, Any]:
        """What the agent reads back: its list in its own shape."""
        return render_list(self.view, self.caps)


def agent_actor(name: str | None, caps: Capabilities) -> str:
    name = (name or caps.name).strip()
    return name if name.startswith("agent:") else f"agent:{name}"


def todowrite(store: Store, session_id: int, write: AgentWrite, *, actor: str,
              sees_response: bool = True, ts: str | None = None, ref: str | None = None,
              origin: str = "agent") -> WriteResult:
    """Merge one agent write. ``sees_response`` says whether the agent reads our answer
    (CLI, MCP) or not (hooks, imports): that decides what its next write is compared to."""
    with store.write(session_id, actor, ref=ref) as tx:
        return apply_write(tx, write, sees_response=sees_response, ts=ts, ref=ref,
                           origin=origin)


def apply_write(tx: Tx, write: AgentWrite, *, sees_response: bool = True,
                ts: str | None = None, ref: str | None = None,
                origin: str = "agent") -> WriteResult:
    """:func:`todowrite` inside a transaction the caller holds, as ``tx.actor``.

    Imports apply a whole transcript's calls in one transaction through this, so they
    make exactly the events the live calls would have made.
    """
    caps = write.caps
    actor = tx.actor
    first = tx.emitted
    base_text = tx.agent_view_text(actor)
    base_format, base = _parse_view(base_text) if base_text else (None, None)
    current = tx.state.todos
    notes = others_changes(base, current, caps) if sees_response else []
    p = plan(current, base, write)
    for num in p.removes:
        tx.remove_todo(num, reason=f"omitted by {actor}'s write", ts=ts, ref=ref)
    created: dict[int, int] = {}
    for c in p.creates:
        it = c.item
        t = tx.create_todo(it.content, status=it.status, priority=it.priority or "medium",
                           active_form=it.active_form, position=c.position, origin=origin,
                           ts=ts, ref=ref)
        created[c.index] = t.num
    for num, changes in p.updates.items():
        tx.update_todo(num, ts=ts, ref=ref, **changes)
    agent_ids = {num: write.items[i].agent_id for i, num in {**p.matched, **created}.items()
                 if write.items[i].agent_id}
    if sees_response:
        view = view_of(list(tx.state.todos.values()), caps, agent_ids)
    else:
        view = sent_view(write, p.matched, created)
    if base is None or base_format != caps.name or tuple(view) != base:
        tx.set_agent_view(actor, {"format": caps.name, "items": view}, ts=ts)
    for num in p.kept:
        t = tx.state.todos[num]
        notes.append(f"kept t{num} {t.content!r}: added by {t.origin}, "
                     "agents do not remove it")
    todos = sorted(tx.state.todos.values(), key=lambda t: (t.position, t.num))
    return WriteResult(caps=caps, todos=todos, view=view, plan=p, events=tx.emitted - first,
                       notes=notes)


@lru_cache(maxsize=256)
def _parse_view(text: str) -> tuple[str | None, tuple[ViewItem, ...] | None]:
    """A stored agent view. Cached by its text: an agent's next write usually finds the
    view its previous write left, so this is parsed once per change, not per write."""
    try:
        doc = json.loads(text)
        return doc.get("format"), tuple(ViewItem(*row) for row in doc["items"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, None  # an unreadable view is no view: merge as a first write


READ_FORMATS = ("prompt", "json", "opencode", "claude", "codex")


def todoread(store: Store, session_id: int, fmt: str = "prompt", *,
             session_name: str = "") -> str:
    todos = sorted(store.todos(session_id), key=lambda t: (t.position, t.num))
    if fmt == "json":
        by_num = {t.num: t for t in todos}
        return json.dumps([todo_json(t, by_num) for t in todos], indent=2, ensure_ascii=False)
    if fmt in ("opencode", "claude", "codex"):
        caps = caps_named(fmt)
        return json.dumps(render_list(view_of(todos, caps), caps), indent=2, ensure_ascii=False)
    if fmt == "prompt":
        return prompt_block(todos, session_name)
    raise ValueError(fmt)


_GLYPH = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "blocked": "[!]",
          "cancelled": "[-]"}


def prompt_block(todos: list[TodoState], session_name: str = "") -> str:
    """A compact list to paste back into an agent's context after compaction."""
    by_num = {t.num: t for t in todos}
    done = sum(t.status == "completed" for t in todos)
    head = f"Todo list{f' (session {session_name})' if session_name else ''}: " \
           f"{done}/{len(todos)} completed. Kept by todo-harness; update it with todowrite."
    lines = [head]
    for t in todos:
        line = f"{_GLYPH.get(t.status, '[?]')} t{t.num} {safe_line(t.content)} ({t.priority})"
        waits = unmet_dependencies(t, by_num)
        if waits:
            line += " - waiting on " + ", ".join(f"t{d}" for d in waits)
        if t.status == "blocked":
            line += f" - blocked: {safe_line(t.blocked_reason or 'no reason given')}"
        lines.append(line)
    if not todos:
        lines.append("(empty)")
    return "\n".join(lines)


def todo_json(t: TodoState, by_num: dict[int, TodoState]) -> dict[str, Any]:
    return {
        "id": t.id, "content": t.content, "status": t.status, "priority": t.priority,
        "active_form": t.active_form, "stage": t.stage,
        "depends_on": [f"t{d}" for d in t.depends_on],
        "waiting_on": [f"t{d}" for d in unmet_dependencies(t, by_num)],
        "blocked_reason": t.blocked_reason, "origin": t.origin, "position": t.position,
        "created_at": t.created_at, "updated_at": t.updated_at,
    }
