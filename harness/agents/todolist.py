"""An agent's todo write and read: the hot path of the store.

``todowrite`` merges a full list from an agent (see :mod:`harness.merge`) in one write
transaction, applying the plan through :func:`harness.agents.agent_write.apply` (the route
Claude Code's per-task tools take too), and answers with the resulting list in the agent's
own format, plus notes on what others changed since the agent last looked. ``todoread``
renders the list for an agent, including the compact ``prompt`` block for putting back
into a context after compaction.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.agents.agent_write import (
    NewTodo,
    Step,
    TodoEdit,
    TodoRemoval,
    apply,
    record_view,
)
from harness.formats import (
    FORMATS,
    AgentWrite,
    Capabilities,
    ViewItem,
    caps_named,
    render_list,
)
from harness.merge import Plan, others_changes, plan, sent_view, standing_notes, view_of
from harness.render import safe_line
from state.fold import TodoState, unmet_dependencies
from state.leases import Lease, iso
from state.store import Store, Tx


@dataclass
class WriteResult:
    caps: Capabilities
    state: dict[int, TodoState]  # the list just after the write (a copy)
    view: list[ViewItem]
    plan: Plan
    events: int
    notes: list[str] = field(default_factory=list)

    @property
    def todos(self) -> list[TodoState]:
        """The list after the write, in list order (sorted when asked, not on the hot path)."""
        return sorted(self.state.values(), key=lambda t: (t.position, t.num))

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
    seen_n = tx.state.n
    base_text = tx.agent_view_text(actor)
    base_format, base_n, base, base_kept = (_parse_view(base_text) if base_text
                                            else (None, None, None, frozenset()))
    current = tx.state.todos
    # Nobody wrote to the session since this agent's last view: its base is still the list.
    untouched = base is not None and base_n == seen_n and base_format == caps.name
    notes = others_changes(base, current, caps) if sees_response and not untouched else []
    p = plan(current, base, write)
    steps: list[Step] = [TodoRemoval(num, "omitted by {actor}'s write") for num in p.removes]
    steps += [NewTodo(c.item.content, status=c.item.status,
                      priority=c.item.priority or "medium", active_form=c.item.active_form,
                      position=c.position) for c in p.creates]
    steps += [TodoEdit(num, fields=changes) for num, changes in p.updates.items()]
    applied = apply(tx, steps, caps=caps, origin=origin, ts=ts, ref=ref)
    created = {c.index: num for c, num in zip(p.creates, applied.created, strict=True)}
    if sees_response:
        if untouched and not (p.creates or p.removes or p.moved):
            # The common case: the same items in the same order, a status or two changed.
            view = _patched(base, tx.state.todos, p.updates, caps)  # type: ignore[arg-type]
        else:
            agent_ids = {num: write.items[i].agent_id
                         for i, num in {**p.matched, **created}.items()
                         if write.items[i].agent_id}
            view = view_of(list(tx.state.todos.values()), caps, agent_ids)
    else:
        view = sent_view(write, p.matched, created)
    kept = frozenset(p.kept)
    if base is None or base_format != caps.name or tuple(view) != base \
            or (sees_response and base_n != tx.state.n) or kept != base_kept:
        doc: dict[str, Any] = {"format": caps.name, "n": tx.state.n, "items": view}
        if kept:
            doc["kept"] = sorted(kept)
        text_ = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        record_view(tx, actor, text_, ts=ts)
        _remember_view(text_, (caps.name, tx.state.n, tuple(view), kept))
    if sees_response:
        notes += standing_notes(tx.state.todos, caps)
    for num in p.kept:
        if num in base_kept:
            continue  # said when the agent first left it out; not on every write since
        t = tx.state.todos[num]
        notes.append(f"kept t{num} {t.content!r}: added by {t.origin}, "
                     "agents do not remove it")
    return WriteResult(caps=caps, state=dict(tx.state.todos), view=view, plan=p,
                       events=tx.emitted - first, notes=notes)


def _patched(base: tuple[ViewItem, ...], todos: dict[int, TodoState],
             updated: dict[int, Any], caps: Capabilities) -> list[ViewItem]:
    """The agent's view with the items this write changed read afresh: equal to
    ``view_of`` when no item was added, removed or moved, at a fraction of its cost."""
    if not updated:
        return list(base)
    fresh = {v.num: v for v in view_of([todos[n] for n in updated], caps)}
    return [fresh[v.num]._replace(agent_id=v.agent_id) if v.num in fresh else v for v in base]


# (format, the session's event number it was taken at, items, people's items it left out)
ParsedView = tuple[str | None, int | None, tuple[ViewItem, ...] | None, frozenset[int]]
_VIEWS: OrderedDict[str, ParsedView] = OrderedDict()
_VIEWS_MAX = 256


def _remember_view(text: str, parsed: ParsedView) -> None:
    _VIEWS[text] = parsed
    _VIEWS.move_to_end(text)
    while len(_VIEWS) > _VIEWS_MAX:
        _VIEWS.popitem(last=False)


def _parse_view(text: str) -> ParsedView:
    """A stored agent view: (format, the session's event number it was taken at, items).

    Cached by its text, and primed by the write that stored it: an agent's next write
    usually finds the view its previous write left, so that view is never decoded."""
    hit = _VIEWS.get(text)
    if hit is not None:
        return hit
    try:
        doc = json.loads(text)
        n = doc.get("n")
        kept = doc.get("kept") or []
        parsed: ParsedView = (doc.get("format"), n if isinstance(n, int) else None,
                              tuple(ViewItem(*row) for row in doc["items"]),
                              frozenset(k for k in kept if isinstance(k, int)))
    except (ValueError, KeyError, TypeError, AttributeError):
        # An unreadable view is no view: merge as a first write.
        parsed = (None, None, None, frozenset())
    _remember_view(text, parsed)
    return parsed


def todoread(store: Store, session_id: int, fmt: str = "prompt", *,
             session_name: str = "") -> str:
    store.expire_lapsed(session_id)  # a claim whose lease ran out is shown pending
    todos = sorted(store.todos(session_id), key=lambda t: (t.position, t.num))
    if fmt == "json":
        by_num = {t.num: t for t in todos}
        return json.dumps([todo_json(t, by_num) for t in todos], indent=2, ensure_ascii=False)
    if fmt in FORMATS:
        caps = caps_named(fmt)
        return json.dumps(render_list(view_of(todos, caps), caps), indent=2, ensure_ascii=False)
    if fmt == "prompt":
        return prompt_block(todos, session_name)
    raise ValueError(fmt)


_GLYPH = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "blocked": "[!]",
          "cancelled": "[-]"}


PROMPT_TAIL = "Kept by todo-harness; update it with todowrite."


def prompt_block(todos: list[TodoState], session_name: str = "", *,
                 tail: str = PROMPT_TAIL) -> str:
    """A compact list to paste back into an agent's context after compaction."""
    by_num = {t.num: t for t in todos}
    done = sum(t.status == "completed" for t in todos)
    head = f"Todo list{f' (session {session_name})' if session_name else ''}: " \
           f"{done}/{len(todos)} completed. {tail}"
    lines = [head]
    lines.extend(prompt_line(t, by_num) for t in todos)
    if not todos:
        lines.append("(empty)")
    return "\n".join(lines)


def prompt_line(t: TodoState, by_num: dict[int, TodoState], width: int | None = None) -> str:
    """One todo as the prompt block shows it: ``[>] t3 Train the drafter (high)``."""
    text = safe_line(t.content, width) if width else safe_line(t.content)
    line = f"{_GLYPH.get(t.status, '[?]')} t{t.num} {text} ({t.priority})"
    waits = unmet_dependencies(t, by_num)
    if waits:
        line += " - waiting on " + ", ".join(f"t{d}" for d in waits)
    if t.status == "blocked":
        reason = t.blocked_reason or "no reason given"
        line += f" - blocked: {safe_line(reason, width) if width else safe_line(reason)}"
    if t.claimed_by is not None and t.status == "in_progress":
        line += f" - claimed by {safe_line(t.claimed_by.removeprefix('agent:'), 40)}"
    return line


def todo_json(t: TodoState, by_num: dict[int, TodoState],
              leases: Mapping[int, Lease] | None = None) -> dict[str, Any]:
    """A todo as JSON for agents and ``--json``; with the session's live ``leases``
    (:func:`live_leases`), its lease's length, expiry and last heartbeat too."""
    data = {
        "id": t.id, "content": t.content, "status": t.status, "priority": t.priority,
        "active_form": t.active_form, "stage": t.stage,
        "depends_on": [f"t{d}" for d in t.depends_on],
        "waiting_on": [f"t{d}" for d in unmet_dependencies(t, by_num)],
        "blocked_reason": t.blocked_reason, "origin": t.origin, "position": t.position,
        "created_at": t.created_at, "updated_at": t.updated_at, "claimed_by": t.claimed_by,
    }
    if leases is not None:
        lease = leases.get(t.num)
        live = lease if lease is not None and lease.holder == t.claimed_by else None
        data["lease_s"] = t.lease_s
        data["lease_expires_at"] = iso(live.expires_at) if live else None
        data["last_heartbeat_at"] = iso(live.heartbeat_at) if live else None
    return data


def live_leases(store: Store, session_id: int, todos: Iterable[TodoState]
                ) -> tuple[float | None, dict[int, Lease]]:
    """(the store's clock, the session's live leases): read only when one of ``todos``
    has a leased claim (no query otherwise: the clock is then None)."""
    if not any(t.lease_s is not None for t in todos):
        return None, {}
    return store.leases(session_id)
