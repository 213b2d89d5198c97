"""Which run's series a person means: ``t7`` (a todo: its newest run that recorded any),
``train`` (the todo bound to that stage), ``r12`` (a run, in any session), and any of
them in another session as ``SESSION:t7`` (last week's training beside this week's)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.charts.model import RunSeries
from harness.errors import UsageError
from harness.render import safe_line
from state.errors import NotFound
from state.fold import RunState, TodoState
from state.store import Store

_TODO = re.compile(r"[tT]?(\d+)")
_RUN = re.compile(r"[rR](\d+)")


@dataclass(frozen=True)
class Target:
    """A run to draw, the todo it ran for, and where it was found."""

    session: str
    run: RunState
    todo: TodoState | None = None

    @property
    def label(self) -> str:
        """``t7 train r9``: what a heading (or a line among others) is called."""
        parts = [self.todo.id] if self.todo is not None else []
        if self.run.stage:
            parts.append(self.run.stage)
        parts.append(f"r{self.run.id}")
        return " ".join(parts)

    def series(self, store: Store, *, label: str | None = None) -> RunSeries:
        return RunSeries(self.run.id, label or f"r{self.run.id}",
                         tuple(store.series([self.run.id])))


def resolve(store: Store, session_id: int, text: str) -> Target:
    """The run ``text`` names (see the module doc); a one-line error when there is none."""
    given = text.strip()
    if ":" in given:
        name, _, rest = given.partition(":")
        row = store.session_by_name(name)
        if row is None:
            raise UsageError(f"no session {name!r}", where=given)
        session_id, given = row.id, rest.strip()
    sess = store.session_by_id(session_id)
    sname = sess.name if sess else str(session_id)
    m = _RUN.fullmatch(given)
    if m:
        try:
            sid, run = store.run(int(m.group(1)))
        except NotFound:
            raise UsageError(f"unknown run {given}", where=text) from None
        todo = _todo(store, sid, run.todo_id)
        other = store.session_by_id(sid)
        return Target(other.name if other else str(sid), run, todo)
    todo = _todo_named(store, session_id, given, text, sname)
    runs = store.runs(session_id, todo_id=todo.num)
    if not runs:
        raise UsageError(f"{todo.id} has no runs yet", where=f"session {sname}",
                         hint="its series are recorded while its stage runs")
    counted = store.series_runs(session_id)
    with_points = [r for r in runs if counted.get(r.id)]
    return Target(sname, (with_points or runs)[-1], todo)


def _todo_named(store: Store, sid: int, given: str, text: str, sname: str) -> TodoState:
    m = _TODO.fullmatch(given)
    if m:
        try:
            return store.todo(sid, int(m.group(1)))
        except NotFound:
            raise UsageError(f"unknown todo t{m.group(1)}", where=f"session {sname}") \
                from None
    bound = [t for t in store.todos(sid) if t.stage == given]
    if not bound:
        raise UsageError(f"not a todo, stage or run: {safe_line(text, 60)!r}",
                         where=f"session {sname}",
                         hint="give a todo (t7), a stage bound to one (train) or a run (r12)")
    return bound[0]


def _todo(store: Store, sid: int, num: int | None) -> TodoState | None:
    if num is None:
        return None
    try:
        return store.todo(sid, num)
    except NotFound:
        return None


def recorded(store: Store, session_id: int) -> list[Target]:
    """Each todo's newest run that recorded series, in todo order (then loose runs)."""
    counted = store.series_runs(session_id)
    if not counted:
        return []
    sess = store.session_by_id(session_id)
    sname = sess.name if sess else str(session_id)
    todos = {t.num: t for t in store.todos(session_id)}
    newest: dict[int | None, RunState] = {}
    loose: list[RunState] = []
    for run in store.runs(session_id):
        if run.id not in counted:
            continue
        if run.todo_id is None:
            loose.append(run)
        else:
            newest[run.todo_id] = run
    out = [Target(sname, run, todos.get(num)) for num, run in
           sorted(newest.items(), key=lambda kv: kv[0] or 0)]
    return out + [Target(sname, run) for run in loose]


__all__ = ["Target", "recorded", "resolve"]
