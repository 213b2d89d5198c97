"""Merging an agent's full-list write into the stored list, without clobbering people.

Agents send their whole list every time. We merge it three ways:

* **ours** - the stored list now (people, runners and other agents may have changed it);
* **base** - this agent's *view*: the list as this agent last knew it (what we answered it,
  or what it sent when it never sees our answer, as with hooks and imports);
* **theirs** - the incoming list.

A field the agent left as it was in its view keeps our value, so a priority or a status a
person set survives the agent's next write even in formats that carry those fields. On top
of that, these rules (also in docs/ARCHITECTURE.md, "Agent writes"):

* items match by id when the format has ids; else by exact content, then normalised content,
  then the same position with similar text (base first, then ours);
* unmatched incoming items are created; unmatched agent items the agent knew are removed
  (on its first write it knew none, so a second agent joining a session removes nothing);
* items a person (or the pipeline) added are never removed by an agent's omission;
* a format that cannot say ``blocked`` does not unblock by resending ``pending`` (nor
  un-cancel, if it cannot say ``cancelled``);
* a write that changes nothing produces an empty plan (and no event).

Everything here is pure: the caller turns the plan into events inside one transaction.
"""

from __future__ import annotations

import bisect
import difflib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.formats import AgentWrite, Capabilities, Item, ViewItem, agent_status
from state.fold import TodoState

SIMILAR = 0.6
_PROTECTED_ORIGINS = frozenset({"human", "pipeline"})
_FIELDS = ("content", "status", "priority", "active_form")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s]", "", text)
    return " ".join(text.split())


@dataclass
class Create:
    index: int
    item: Item
    position: float


@dataclass
class Plan:
    creates: list[Create] = field(default_factory=list)
    updates: dict[int, dict[str, Any]] = field(default_factory=dict)
    removes: list[int] = field(default_factory=list)
    matched: dict[int, int] = field(default_factory=dict)  # incoming index -> num
    kept: list[int] = field(default_factory=list)  # people's items the agent omitted

    @property
    def moved(self) -> bool:
        return any("position" in c for c in self.updates.values())

    @property
    def empty(self) -> bool:
        return not (self.creates or self.updates or self.removes)


def match(current: Mapping[int, TodoState], base: Sequence[ViewItem] | None,
          items: Sequence[Item], caps: Capabilities) -> dict[int, int]:
    """Incoming index -> num, each num used at most once, strongest evidence first."""
    free = set(current)
    result: dict[int, int] = {}
    base = [b for b in (base or []) if b.num in current]
    # The common case: the agent resends the list it was given, with a status or two
    # changed. Same texts (and ids) at the same places is the strongest evidence there is.
    if base and len(base) == len(items) and all(
            b.content == it.content and b.agent_id == it.agent_id
            for b, it in zip(base, items, strict=True)):
        return {i: b.num for i, b in enumerate(base)}

    def take(i: int, num: int | None) -> None:
        if num is not None and num in free and i not in result:
            result[i] = num
            free.discard(num)

    if caps.has_id:
        by_agent_id = {str(b.agent_id): b.num for b in base if b.agent_id}
        for i, it in enumerate(items):
            if it.agent_id is None:
                continue
            num = by_agent_id.get(it.agent_id)
            if num is None and re.fullmatch(r"t\d+", it.agent_id):
                num = int(it.agent_id[1:])  # the agent echoed one of our ids
            take(i, num)

    def by_text(key: Any, pool: list[tuple[int, str]]) -> None:
        if len(result) == len(items):
            return
        index: dict[str, list[int]] = {}
        for num, text in pool:
            index.setdefault(key(text), []).append(num)
        for i, it in enumerate(items):
            if i in result:
                continue
            for num in index.get(key(it.content), []):
                if num in free:
                    take(i, num)
                    break

    base_pool = [(b.num, b.content) for b in base]
    cur_pool = [(t.num, t.content) for t in sorted(current.values(), key=lambda t: t.position)]
    for key in (lambda s: s, normalize):
        by_text(key, base_pool)
        by_text(key, cur_pool)

    # Same position with similar text: the agent reworded one of its own items in place.
    # Only items in its view count (on a first write there are none), and only agent
    # items, so neither a person's item nor another agent's is taken over by a look-alike.
    if not base:
        return result
    ordered = [b.num for b in base if current[b.num].origin not in _PROTECTED_ORIGINS]
    for i, it in enumerate(items):
        if i in result or i >= len(ordered):
            continue
        num = ordered[i]
        if num in free:
            ratio = difflib.SequenceMatcher(None, normalize(it.content),
                                            normalize(current[num].content)).ratio()
            if ratio >= SIMILAR:
                take(i, num)
    return result


def plan(current: Mapping[int, TodoState], base: Sequence[ViewItem] | None,
         write: AgentWrite) -> Plan:
    caps, items = write.caps, write.items
    out = Plan(matched=match(current, base, items, caps))
    base_by_num = {b.num: b for b in (base or []) if b.num in current}

    for i, num in out.matched.items():
        it, b = items[i], base_by_num.get(num)
        if b is not None and b[1:] == it:
            continue  # exactly as the agent last knew it: nothing of the agent's to apply
        changes = field_changes(current[num], b, it, caps)
        if changes:
            out.updates[num] = changes

    matched_nums = set(out.matched.values())
    for num, todo in current.items():
        if num in matched_nums:
            continue
        if todo.origin in _PROTECTED_ORIGINS:
            out.kept.append(num)
        elif num in base_by_num:
            out.removes.append(num)
        # An agent item this agent never saw stays: another agent's, or anything at all on
        # this agent's first write (it cannot mean to drop what it was never shown).
    _positions(current, base_by_num, items, out)
    return out


def field_changes(cur: TodoState, base: ViewItem | None, it: Item,
                  caps: Capabilities) -> dict[str, Any]:
    """What the agent's word ``it`` on one todo changes in ``cur``, merged against
    ``base``, the todo as the agent last knew it (None: apply what it says outright).
    The one rule for every agent write, whole list or single task
    (:mod:`harness.agents.agent_write`). A None field of ``it`` says nothing."""
    changes: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(it, name)
        if value is None:
            continue  # the format cannot say it: keep what is stored
        if base is not None and getattr(base, name) == value:
            continue  # the agent did not change it: keep ours, whoever set it
        stored = cur.status if name == "status" else getattr(cur, name)
        if name == "status":
            if stored == "blocked" and value == "pending" and not caps.has_blocked:
                continue
            if stored == "cancelled" and value == "pending" and not caps.has_cancelled:
                continue
            if agent_status(stored, caps) == value and stored not in caps.statuses:
                continue  # it already reads as this value to the agent
        if value != stored:
            changes[name] = value
    if "status" in changes and cur.status == "blocked":
        changes["blocked_reason"] = None
    return changes


def _positions(current: Mapping[int, TodoState], base_by_num: Mapping[int, ViewItem],
               items: Sequence[Item], out: Plan) -> None:
    """Give new items a place after the item the agent put before them, and move matched
    items only when the agent itself reordered them (else a person's order stands)."""
    matched_seq = [out.matched[i] for i in range(len(items)) if i in out.matched]
    matched_set = set(matched_seq)
    base_seq = [n for n in base_by_num if n in matched_set]
    reorder = not base_by_num or matched_seq != base_seq
    if not reorder and len(matched_seq) == len(items):
        return  # nothing new and nothing moved: every position stands
    removed = set(out.removes)
    taken = sorted(t.position for n, t in current.items() if n not in removed)
    # For items the agent put first: the position of the next item it kept, if any.
    next_kept: list[float | None] = [None] * len(items)
    upcoming: float | None = None
    for i in reversed(range(len(items))):
        next_kept[i] = upcoming
        if i in out.matched:
            upcoming = current[out.matched[i]].position
    prev: float | None = None
    for i, it in enumerate(items):
        num = out.matched.get(i)
        if num is not None:
            pos = current[num].position
            if not reorder or prev is None or pos > prev:
                prev = pos
                continue
            new = _between(prev, taken)
            out.updates.setdefault(num, {})["position"] = new
            bisect.insort(taken, new)
            prev = new
        else:
            if prev is None and next_kept[i] is not None:
                new = _before(next_kept[i], taken)
            elif prev is None:
                new = taken[-1] + 1.0 if taken else 1.0  # a new list goes after the old
            else:
                new = _between(prev, taken)
            out.creates.append(Create(index=i, item=it, position=new))
            bisect.insort(taken, new)
            prev = new


def _before(pos: float, taken: list[float]) -> float:
    j = bisect.bisect_left(taken, pos)
    return pos - 1.0 if j == 0 else (taken[j - 1] + pos) / 2


def _between(prev: float | None, taken: list[float]) -> float:
    """A position just after ``prev`` and before the next taken one."""
    if prev is None:
        return (taken[0] - 1.0) if taken else 1.0
    j = bisect.bisect_right(taken, prev)
    if j == len(taken):
        return prev + 1.0
    return (prev + taken[j]) / 2


def view_of(todos: Sequence[TodoState], caps: Capabilities,
            agent_ids: Mapping[int, str] | None = None) -> list[ViewItem]:
    """The list as this agent will read it: what goes back to it, and its next base."""
    agent_ids = agent_ids or {}
    prio, form = caps.has_priority, caps.has_active_form
    return [ViewItem(t.num, t.content, agent_status(t.status, caps),
                     t.priority if prio else None, t.active_form if form else None,
                     agent_ids.get(t.num))
            for t in sorted(todos, key=lambda t: (t.position, t.num))]


def sent_view(write: AgentWrite, matched: Mapping[int, int],
              created: Mapping[int, int]) -> list[ViewItem]:
    """The list as the agent itself sent it (its view when it never reads our answer)."""
    return [ViewItem(matched.get(i, created.get(i)), it.content, it.status, it.priority,
                     it.active_form, it.agent_id) for i, it in enumerate(write.items)]


def others_changes(base: Sequence[ViewItem] | None, current: Mapping[int, TodoState],
                   caps: Capabilities) -> list[str]:
    """What someone else changed since this agent's view: for the agent to read."""
    if base is None:
        return []
    notes: list[str] = []
    known = {b.num: b for b in base if b.num is not None}
    for num, t in sorted(current.items()):
        b = known.get(num)
        if b is None:
            notes.append(f"added t{num} {t.content!r} ({t.status}, {t.priority}) by someone else")
            continue
        if (b.content == t.content and b.status == t.status
                and (b.priority == t.priority or not caps.has_priority)):
            continue  # the usual case: nothing to tell
        for name in _FIELDS:
            if name == "priority" and not caps.has_priority:
                continue
            if name == "active_form":
                continue
            now = agent_status(t.status, caps) if name == "status" else getattr(t, name)
            old = getattr(b, name)
            if old is not None and now != old:
                notes.append(f"t{num} {name}: {old!r} -> {now!r}")
    for num, b in known.items():
        if num not in current:
            notes.append(f"t{num} {b.content!r} was removed")
    return notes


def standing_notes(current: Mapping[int, TodoState], caps: Capabilities) -> list[str]:
    """What the agent's own shape cannot show, told on every answer: which items are
    really blocked (and why), and which were cancelled."""
    notes: list[str] = []
    for num, t in sorted(current.items()):
        if t.status == "blocked" and not caps.has_blocked:
            notes.append(f"t{num} is blocked: {t.blocked_reason or 'no reason given'}")
        elif t.status == "cancelled" and not caps.has_cancelled:
            notes.append(f"t{num} was cancelled (shown as completed)")
    return notes
