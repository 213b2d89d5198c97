"""What others changed in a session's list since its agent last saw it, told once.

A person's change (``harness prio``, the TUI), the runner's or another agent's reaches an
agent only when something hands it over. Every agent integration does so on its next
answer that the agent reads: a Claude Code or Codex hook's ``additionalContext``, the
text opencode's plugin hands back, an MCP tool's answer. This module is the part they
share; it knows nothing of any agent's format.

The API (stable; the agent integrations depend on it):

* :func:`take` ``(store, session_id, actor, *, label=None) -> Notice | None``: the
  changes since ``actor`` last saw the list, by anyone but ``actor``, in one short block,
  and marks them seen. Call it where the answer is built, and deliver ``notice.text()``.
  None: nothing new (the usual case; it then costs two indexed reads and writes nothing).
* :func:`take_in` ``(tx, actor, *, label=None) -> Notice | None``: the same inside a
  write transaction the caller already holds (a hook that writes anyway), so the notice
  and the seen mark commit with the hook's own change.
* :func:`mark_seen` ``(tx, actor)``: the agent has just been shown the whole list (a
  ``SessionStart`` answer after a cut, ``todoread``, a ``todowrite`` answer with its
  notes): everything up to now counts as seen.
* :func:`seen_now` ``(store, session_id, actor)``: :func:`mark_seen` in a transaction
  of its own, taken only when something is unseen.
* :func:`pending` ``(store, session_id, actor, *, label=None) -> Notice | None``: what
  :func:`take` would deliver, marking nothing (for ``harness show`` and tests).
* :class:`Notice`: ``lines`` (one per changed todo, oldest first), ``upto`` (the
  session's event number it runs to), ``more`` (lines left out beyond
  :data:`MAX_LINES`) and ``text()``.
* :data:`Labeler` ``(todo number) -> str | None``: the agent's own name for an item
  (``#3``, Claude's task 3; ``step 2``, the second step of Codex's plan), called only
  when there is something to tell. :func:`positions` makes one from the list an agent
  last sent (its agent view).

Each line names the item the way the agent can find it in what it holds: the agent's
own id where it has one, the item's text (shortened), and our ``t`` id (the one the MCP
tools and ``harness`` commands take), then what changed and by whom::

    #1 "Train the drafter" (t1): priority 'low' -> 'high' by human
    "Check the acceptance length" (t3): added by human (pending, high)

The seen mark is an agent view of its own, ``<actor>/notice``, holding ``{"n": N}``:
the session's event number the agent has seen up to. It lives in the store, so it
survives the hook processes (one per call) and a restart of the MCP server. An actor
with no mark has seen nothing: its first answer tells it what others did before it
arrived (up to :data:`MAX_LINES`), unless it was first shown the whole list.

Two answers racing for one notice (two hooks at once) deliver it once: the mark is
compared and set under the store's write lock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.render import expiry_text, safe_line
from state.db.sql import EVENT_COLS, event_from_row
from state.fold import LEASE_EXPIRED, Event
from state.store import Store, Tx

NOTICE_SUFFIX = "/notice"
MAX_LINES = 8
HEAD = "todo-harness: the todo list changed since you last saw it"
TODO_KINDS = ("todo.created", "todo.updated", "todo.removed", "todo.noted")
# Fields worth a model's attention; position and active_form change with every reorder
# or rewording and say nothing about what to do next.
_FIELDS = ("content", "status", "priority", "blocked_reason", "depends_on", "stage")
NAME_WIDTH = 60  # an item's text in a line's name: enough to tell items apart

# The agent's own name for todo ``num`` (``#3``, ``step 2``), or None.
Labeler = Callable[[int], str | None]


@dataclass(frozen=True)
class Notice:
    session_id: int
    actor: str
    upto: int
    lines: list[str] = field(default_factory=list)
    more: int = 0

    def text(self) -> str:
        body = [HEAD + ":"] + [f"- {line}" for line in self.lines]
        if self.more:
            body.append(f"- and {self.more} more change(s); read the whole list")
        return "\n".join(body)


def notice_key(actor: str) -> str:
    return actor + NOTICE_SUFFIX


def _seen_of(raw: str | None) -> int:
    if not raw:
        return 0
    try:
        n = json.loads(raw).get("n")
    except (ValueError, AttributeError):
        return 0
    return n if isinstance(n, int) and n >= 0 else 0


def _who(actor: str) -> str:
    return actor.removeprefix("agent:") if actor.startswith("agent:") else actor


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"t{v}" if isinstance(v, int) else str(v) for v in value) + "]"
    if value is None:
        return "none"
    return repr(safe_line(str(value), 80))


def positions(get_view: Callable[[str], Any], actor: str, word: str | None) -> Labeler:
    """A :data:`Labeler` from the list ``actor`` last sent or was shown (its agent view,
    read through ``get_view`` on the first call): ``"<word> <position>"``, counted from 1
    as the agent counts its list; with ``word`` None, the agent's own id for the item (a
    list with ids, as Copilot CLI's todos table). A todo not in that list has no label."""
    found: dict[int, str] | None = None

    def label(num: int) -> str | None:
        nonlocal found
        if found is None:
            view = get_view(actor)
            rows = view.get("items") if isinstance(view, dict) else None
            found = {}
            for i, row in enumerate(rows if isinstance(rows, list) else [], 1):
                if not (isinstance(row, list) and row and isinstance(row[0], int)):
                    continue
                own = row[5] if len(row) > 5 and row[5] else None
                if word is not None or own:
                    found[row[0]] = f"{word} {i}" if word is not None else str(own)
        return found.get(num)

    return label


def item_name(num: int, text: str | None, label: Labeler | None = None) -> str:
    """``#1 "Train the drafter" (t1)``: the agent's id (when it has one), the text, ours."""
    own = label(num) if label is not None else None
    parts = [own] if own else []
    if text:
        parts.append('"' + safe_line(text, NAME_WIDTH).replace('"', "'") + '"')
    parts.append(f"(t{num})" if parts else f"t{num}")
    return " ".join(parts)


def summarize(events: Iterable[Event], actor: str, *,
              text_of: Callable[[int], str | None] | None = None,
              label: Labeler | None = None) -> list[str]:
    """One line per todo changed by someone other than ``actor``: a field changed several
    times shows its first old and last new value; a todo added and changed shows as
    added, as it now is. Each line starts with the item's name (:func:`item_name`): its
    text as the agent last knew it (``text_of`` gives the stored text of a todo the
    events only changed) and its ``label``."""
    order: list[int] = []
    made: dict[int, dict[str, Any]] = {}  # num -> what the line says
    for ev in events:
        if ev.actor == actor or ev.kind not in TODO_KINDS or ev.todo_id is None:
            continue
        num = int(ev.todo_id)
        entry = made.get(num)
        if entry is None:
            entry = made[num] = {"who": [], "changes": {}, "notes": []}
            order.append(num)
        who = _who(ev.actor)
        if who not in entry["who"]:
            entry["who"].append(who)
        p = ev.payload
        if ev.kind == "todo.created":
            entry["added"] = dict(p)
        elif ev.kind == "todo.removed":
            entry["removed"] = p.get("content")
        elif ev.kind == "todo.noted":
            text = p.get("text")
            if isinstance(text, str) and text.strip():
                entry["notes"].append(text)
        else:
            if isinstance(p.get(LEASE_EXPIRED), dict):  # why it went back to pending
                entry["notes"].append(expiry_text(p[LEASE_EXPIRED]))
            for name, pair in (p.get("changes") or {}).items():
                if name not in _FIELDS or not isinstance(pair, list) or len(pair) != 2:
                    continue
                if "added" in entry:
                    entry["added"][name] = pair[1]
                    continue
                old = entry["changes"].get(name, (pair[0], None))[0]
                entry["changes"][name] = (old, pair[1])
    lines = []
    for num in order:
        e = made[num]
        by = " by " + ", ".join(e["who"])
        if "removed" in e:
            if "added" in e:
                continue  # came and went: nothing the agent could act on
            old = e["changes"].get("content", (e["removed"],))[0]
            lines.append(f"{item_name(num, _str(old), label)}: removed{by}")
            continue
        if "added" in e:
            a = e["added"]
            lines.append(f"{item_name(num, _str(a.get('content')), label)}: added{by} "
                         f"({a.get('status', 'pending')}, {a.get('priority', 'medium')})")
            continue
        changes = e["changes"]
        parts = []
        for name in _FIELDS:
            if name not in changes or changes[name][0] == changes[name][1]:
                continue
            old, new = changes[name]
            if name == "blocked_reason" and changes.get("status", (0, 0))[1] == "blocked":
                continue  # said with the status
            # The old text is in the item's name already.
            part = (f"content -> {_short(new)}" if name == "content"
                    else f"{name} {_short(old)} -> {_short(new)}")
            if name == "status" and new == "blocked" and "blocked_reason" in changes:
                part += f" ({_short(changes['blocked_reason'][1])})"
            parts.append(part)
        parts += [f"note {_short(text)}" for text in e["notes"]]
        if parts:
            known = changes["content"][0] if "content" in changes else \
                (text_of(num) if text_of is not None else None)
            lines.append(f"{item_name(num, _str(known), label)}: " + "; ".join(parts) + by)
    return lines


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _notice(session_id: int, actor: str, upto: int, events: Iterable[Event],
            text_of: Callable[[int], str | None], label: Labeler | None) -> Notice | None:
    lines = summarize(events, actor, text_of=text_of, label=label)
    if not lines:
        return None
    return Notice(session_id, actor, upto, lines[:MAX_LINES], max(0, len(lines) - MAX_LINES))


def pending(store: Store, session_id: int, actor: str, *,
            label: Labeler | None = None) -> Notice | None:
    """What :func:`take` would deliver now, marking nothing."""
    seen = _seen_of(_text(store.agent_view(session_id, notice_key(actor))))
    last = store.last_n(session_id)
    if last <= seen:
        return None
    events = store.events(session_id, after_n=seen, upto_n=last, kinds=TODO_KINDS)
    texts: dict[int, str] | None = None

    def text_of(num: int) -> str | None:
        nonlocal texts
        if texts is None:
            texts = {t.num: t.content for t in store.todos(session_id)}
        return texts.get(num)

    return _notice(session_id, actor, last, events, text_of, label)


def _text(view: Any) -> str | None:
    if view is None or isinstance(view, str):
        return view
    return json.dumps(view)


def take_in(tx: Tx, actor: str, *, label: Labeler | None = None) -> Notice | None:
    """:func:`take` inside a write transaction the caller holds (on ``tx``'s session);
    the mark commits with the caller's transaction, and rolls back with it."""
    key = notice_key(actor)
    seen = _seen_of(tx.agent_view_text(key))
    upto = tx.state.n
    if upto <= seen:
        return None
    rows = tx.fetch_all(f"SELECT {EVENT_COLS} FROM events WHERE session_id = ? AND n > ? "
                        "AND n <= ? ORDER BY n", tx.session_id, seen, upto)
    tx.set_agent_view(key, {"n": upto})
    todos = tx.state.todos
    return _notice(tx.session_id, actor, upto, (event_from_row(r) for r in rows),
                   lambda num: todos[num].content if num in todos else None, label)


def take(store: Store, session_id: int, actor: str, *,
         label: Labeler | None = None) -> Notice | None:
    """What others changed since ``actor`` last saw the list (None: nothing), marked
    seen: the caller must deliver it."""
    if store.last_n(session_id) <= _seen_of(_text(store.agent_view(session_id,
                                                                   notice_key(actor)))):
        return None  # the usual case, without taking the write lock
    with store.write(session_id, actor) as tx:
        return take_in(tx, actor, label=label)


def seen_now(store: Store, session_id: int, actor: str) -> None:
    """:func:`mark_seen` in a transaction of its own, taken only when there is news."""
    if store.last_n(session_id) > _seen_of(_text(store.agent_view(session_id,
                                                                 notice_key(actor)))):
        with store.write(session_id, actor) as tx:
            mark_seen(tx, actor)


def mark_seen(tx: Tx, actor: str) -> None:
    """``actor`` has just been shown the whole list: nothing before now is news."""
    key = notice_key(actor)
    if _seen_of(tx.agent_view_text(key)) < tx.state.n:
        tx.set_agent_view(key, {"n": tx.state.n})
