"""Todo use cases for people (and the TUI): add, mark, block, reprioritise, move, edit, note.

Every function is one write transaction and writes events with the given actor (``human``
unless a caller says otherwise). A change that changes nothing writes nothing and says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.errors import InputError, UsageError
from harness.formats import FORMATS, agent_status, caps_named, normalize_priority
from state.fold import PRIORITIES, STATUS_GROUP, TodoState
from state.leases import NO_LEASE
from state.store import Store, Tx

HUMAN = "human"


@dataclass
class Outcome:
    todo: TodoState
    changed: dict[str, list[object]]

    @property
    def noop(self) -> bool:
        return not self.changed


def parse_id(text: str | int) -> int:
    """``t12``, ``T12`` or ``12`` -> 12."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*[tT]?(\d+)\s*", str(text))
    if not m:
        raise UsageError(f"not a todo id: {text!r} (expected something like t12)")
    return int(m.group(1))


def parse_lease(value: object, where: str = "--lease") -> float:
    """Seconds of a lease as people and models write it (``15m``, ``90s``, ``1h30m``, a
    number of seconds); ``none``/``off``/``0``: no lease (:data:`NO_LEASE`)."""
    from pipeline.spec.durations import parse_duration  # the spec's own durations

    if isinstance(value, str) and value.strip().lower() in ("none", "off", "never", "0"):
        return NO_LEASE
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return NO_LEASE
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise InputError(f"{exc} (or `none` for a claim that never expires)",
                         where=where) from None


def add(store: Store, session_id: int, content: str, *, priority: str = "medium",
        stage: str | None = None, depends_on: Sequence[str | int] = (),
        move_stage: bool = False, actor: str = HUMAN, origin: str = "human") -> TodoState:
    """A new todo; ``stage`` binds it to a pipeline stage that no other todo holds (with
    ``move_stage``, the binding moves from its holder to the new todo)."""
    if not content or not content.strip():
        raise InputError("a todo needs some text")
    prio = normalize_priority(priority)
    deps = [parse_id(d) for d in depends_on]
    with store.write(session_id, actor) as tx:
        moved = _take_stage(tx, _stage_name(stage), None, move=move_stage) \
            if stage is not None else []
        t = tx.create_todo(content, priority=prio, stage=stage, depends_on=deps,
                           origin=origin)
        _note_moves(tx, stage, moved, t.num)
        return t


def bind_stage(store: Store, session_id: int, ident: str | int, stage: str | None, *,
               move_stage: bool = False, actor: str = HUMAN) -> Outcome:
    """Bind todo ``ident`` to ``stage`` (None: unbind it). A stage another todo holds is
    refused unless ``move_stage``: the runner runs each stage as the one todo bound to it,
    so a second binding would silently take the stage from the first."""
    num = parse_id(ident)
    with store.write(session_id, actor) as tx:
        tx.todo(num)
        moved = _take_stage(tx, _stage_name(stage), num, move=move_stage) \
            if stage is not None else []
        diff = tx.update_todo(num, stage=stage)
        _note_moves(tx, stage, moved, num)
        return Outcome(todo=tx.todo(num), changed=diff)


def _stage_name(stage: str) -> str:
    if not stage.strip() or stage != stage.strip():
        raise UsageError(f"bad stage name {stage!r}")
    return stage


def _take_stage(tx: Tx, stage: str, num: int | None, *, move: bool) -> list[int]:
    """Unbind ``stage`` from the todos other than ``num`` that hold it (only when told to
    move it); returns them."""
    holders = [t for t in tx.state.todos.values() if t.stage == stage and t.num != num]
    if not holders:
        return []
    held = holders[0]
    if not move:
        raise UsageError(f"stage {stage!r} is bound to {held.id} ({held.status}): the "
                         f"pipeline runs it as that todo; say --move-stage to move it, or "
                         f"work in a session of your own (`harness session new NAME`)")
    active = [r for r in tx.load_runs().values()
              if r.todo_id == held.num and r.state in ("queued", "running")]
    if active:
        raise InputError(f"stage {stage!r} cannot move: its run r{active[0].id} of "
                         f"{held.id} is {active[0].state} (`harness cancel r{active[0].id}` "
                         "first)")
    for t in holders:
        tx.update_todo(t.num, stage=None)
    return [t.num for t in holders]


def _note_moves(tx: Tx, stage: str | None, moved: list[int], to: int) -> None:
    for old in moved:
        tx.emit("todo.noted", todo_id=old, payload={"text": f"stage {stage} moved to t{to}"})


def _change(store: Store, session_id: int, ident: str | int, actor: str, **changes: object
            ) -> Outcome:
    num = parse_id(ident)
    with store.write(session_id, actor) as tx:
        diff = tx.update_todo(num, **changes)
        out = Outcome(todo=tx.todo(num), changed=diff)
    return _to_claude(store, session_id, actor, out)


# What a Claude Code task file holds of a todo (harness/agents/claude/task_files.py).
_TASK_FIELDS = ("content", "status", "active_form")


def _to_claude(store: Store, session_id: int, actor: str, out: Outcome) -> Outcome:
    """A change to a todo that is one of Claude Code's tasks goes into its task file."""
    if any(name in out.changed for name in _TASK_FIELDS):
        from harness.agents.claude.task_files import write_back_now

        write_back_now(store, session_id, actor)
    return out


def set_status(store: Store, session_id: int, ident: str | int, status: str, *,
               actor: str = HUMAN, reason: str | None = None) -> Outcome:
    changes: dict[str, object] = {"status": status}
    if status == "blocked":
        if not reason or not reason.strip():
            raise UsageError("blocking needs a reason (--reason TEXT)")
        changes["blocked_reason"] = reason
    else:
        changes["blocked_reason"] = None
    return _change(store, session_id, ident, actor, **changes)


def unblock(store: Store, session_id: int, ident: str | int, *, actor: str = HUMAN) -> Outcome:
    num = parse_id(ident)
    with store.write(session_id, actor) as tx:
        todo = tx.todo(num)
        if todo.status != "blocked":
            return Outcome(todo=todo, changed={})
        diff = tx.update_todo(num, status="pending", blocked_reason=None)
        out = Outcome(todo=tx.todo(num), changed=diff)
    return _to_claude(store, session_id, actor, out)


def set_priority(store: Store, session_id: int, ident: str | int, level: str, *,
                 actor: str = HUMAN) -> Outcome:
    num = parse_id(ident)
    with store.write(session_id, actor) as tx:
        todo = tx.todo(num)
        if level in ("up", "down"):
            rank = PRIORITIES.index(todo.priority) + (-1 if level == "up" else 1)
            prio = PRIORITIES[min(max(rank, 0), len(PRIORITIES) - 1)]
        else:
            prio = normalize_priority(level)
        diff = tx.update_todo(num, priority=prio)
        return Outcome(todo=tx.todo(num), changed=diff)


def edit(store: Store, session_id: int, ident: str | int, content: str, *,
         actor: str = HUMAN) -> Outcome:
    if not content or not content.strip():
        raise InputError("a todo needs some text")
    return _change(store, session_id, ident, actor, content=content)


def set_depends(store: Store, session_id: int, ident: str | int, depends_on: Sequence[str | int],
                *, actor: str = HUMAN) -> Outcome:
    num = parse_id(ident)
    deps = [parse_id(d) for d in depends_on]
    with store.write(session_id, actor) as tx:
        for d in deps:
            tx.todo(d)
        if reaches(tx, deps, num):
            raise InputError(f"t{num} cannot depend on {', '.join(f't{d}' for d in deps)}: "
                             "that makes a cycle")
        diff = tx.update_todo(num, depends_on=deps)
        return Outcome(todo=tx.todo(num), changed=diff)


def reaches(tx: Tx, starts: Sequence[int], target: int) -> bool:
    """Whether ``target`` is among ``starts`` or what they (transitively) depend on."""
    seen: set[int] = set()
    stack = list(starts)
    while stack:
        n = stack.pop()
        if n == target:
            return True
        if n in seen or n not in tx.state.todos:
            continue
        seen.add(n)
        stack.extend(tx.state.todos[n].depends_on)
    return False


def note(store: Store, session_id: int, ident: str | int, text: str, *,
         actor: str = HUMAN) -> TodoState:
    if not text or not text.strip():
        raise InputError("a note needs some text")
    num = parse_id(ident)
    with store.write(session_id, actor) as tx:
        tx.todo(num)
        tx.emit("todo.noted", todo_id=num, payload={"text": text})
        return tx.todo(num)


def _bucket(todos: dict[int, TodoState], todo: TodoState) -> list[TodoState]:
    """The todos a person sees next to this one: same board section, same priority."""
    return sorted((t for t in todos.values()
                   if STATUS_GROUP[t.status] == STATUS_GROUP[todo.status]
                   and t.priority == todo.priority),
                  key=lambda t: (t.position, t.num))


def move(store: Store, session_id: int, ident: str | int, *, up: bool = False,
         down: bool = False, to: int | None = None, actor: str = HUMAN) -> Outcome:
    """Move a todo among its neighbours on the board (same section and priority).

    ``to`` is 1-based within that group. Moving changes one position, so it is one event.
    """
    if sum((up, down, to is not None)) != 1:
        raise UsageError("say exactly one of --up, --down or --to N")
    num = parse_id(ident)
    with store.write(session_id, actor) as tx:
        todo = tx.todo(num)
        group = _bucket(tx.state.todos, todo)
        idx = group.index(todo)
        if up:
            target = idx - 1
        elif down:
            target = idx + 1
        else:
            assert to is not None
            if to < 1:
                raise UsageError("--to counts from 1")
            target = min(to, len(group)) - 1
        target = min(max(target, 0), len(group) - 1)
        if target == idx:
            return Outcome(todo=todo, changed={})
        others = [t for t in group if t.num != num]
        before = others[target - 1].position if target > 0 else None
        after = others[target].position if target < len(others) else None
        if before is None and after is not None:
            pos = after - 1.0
        elif after is None and before is not None:
            pos = before + 1.0
        else:
            assert before is not None and after is not None
            pos = (before + after) / 2
        diff = tx.update_todo(num, position=pos)
        return Outcome(todo=tx.todo(num), changed=diff)


def update_item(store: Store, session_id: int, ident: str | int, *, status: str | None = None,
                priority: str | None = None, blocked_reason: str | None = None,
                actor: str = HUMAN) -> Outcome:
    """One item's status, priority and/or blocked reason, in one event.

    A reason without a status blocks the item (or rewords the reason of a blocked one);
    any status but ``blocked`` clears the reason. Everything is checked before anything
    is written. When ``actor`` is an agent with a stored view of the list, the view learns
    the change too, so the agent's next full-list write does not report it back as
    someone else's.
    """
    if status is None and priority is None and blocked_reason is None:
        raise UsageError("say what to change: a status, a priority or a blocked reason")
    if status is not None and status not in STATUS_GROUP:
        raise InputError(f"unknown status {status!r} (expected one of "
                         f"{', '.join(STATUS_GROUP)})")
    if blocked_reason is not None and not blocked_reason.strip():
        raise InputError("a blocked reason needs some text")
    if status is None and blocked_reason is not None:
        status = "blocked"
    if status == "blocked" and blocked_reason is None:
        raise UsageError("blocking needs a reason")
    prio = normalize_priority(priority) if priority is not None else None
    num = parse_id(ident)
    changes: dict[str, object] = {}
    if status is not None:
        changes["status"] = status
        changes["blocked_reason"] = blocked_reason if status == "blocked" else None
    if prio is not None:
        changes["priority"] = prio
    with store.write(session_id, actor) as tx:
        seen_n = tx.state.n
        diff = tx.update_todo(num, **changes)
        if diff and actor.startswith("agent:"):
            _patch_view(tx, actor, tx.todo(num), seen_n)
        out = Outcome(todo=tx.todo(num), changed=diff)
    return _to_claude(store, session_id, actor, out)


def _patch_view(tx: Tx, actor: str, todo: TodoState, seen_n: int) -> None:
    view = tx.agent_view(actor)
    if not isinstance(view, dict) or not isinstance(view.get("items"), list):
        return
    if view.get("n") == seen_n:
        view["n"] = tx.state.n  # the agent was up to date, and made this change itself
    fmt = view.get("format")
    caps = caps_named(fmt) if fmt in FORMATS else None
    touched = False
    for row in view["items"]:
        if isinstance(row, list) and row and row[0] == todo.num:
            row[2] = agent_status(todo.status, caps) if caps else todo.status
            if len(row) > 3 and row[3] is not None:
                row[3] = todo.priority
            touched = True
    if touched:
        tx.set_agent_view(actor, view)
