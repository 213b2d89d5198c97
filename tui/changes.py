"""The changes a person makes in the TUI, as jobs for the store thread.

Each one calls the same :mod:`harness.todos` use case as the CLI command of the same
name, with actor ``human``, so the events are exactly the ones the CLI would write.
The returned :class:`~tui.messages.WriteDone` says what happened, as the CLI would.
"""

from __future__ import annotations

from harness import todos as uc
from harness.render import safe_line
from state.errors import NotFound
from state.fold import TodoState
from state.store import Store
from tui.messages import WriteDone
from tui.store_io import Job

HUMAN = uc.HUMAN
_VERB = {"in_progress": "started", "completed": "done", "cancelled": "cancelled",
         "blocked": "blocked"}


def _said(outcome: uc.Outcome, verb: str, already: str) -> WriteDone:
    t = outcome.todo
    if outcome.noop:
        return WriteDone(f"{t.id} is already {already}; nothing changed", severity="warning")
    parts = [f"{k} {safe_line(str(a), 30)} → {safe_line(str(b), 30)}"
             for k, (a, b) in outcome.changed.items() if k != "blocked_reason" or b]
    return WriteDone(f"{t.id} {verb}: " + "; ".join(parts))


def set_status(store: Store, sid: int, num: int, status: str, *,
               reason: str | None = None) -> Job:
    def job() -> WriteDone:
        out = uc.set_status(store, sid, num, status, actor=HUMAN, reason=reason)
        done = _said(out, _VERB.get(status, status), out.todo.status.replace("_", " "))
        if status == "in_progress" and not out.noop:
            waits = [d for d in out.todo.depends_on
                     if (t := _todo(store, sid, d)) is not None and t.status != "completed"]
            if waits:
                return WriteDone(done.text + " (warning: waiting on "
                                 + ", ".join(f"t{d}" for d in waits) + ")", "warning")
        return done
    return job


def _todo(store: Store, sid: int, num: int) -> TodoState | None:
    try:
        return store.todo(sid, num)
    except NotFound:  # a dependency an agent removed no longer holds anything up
        return None


def unblock(store: Store, sid: int, num: int) -> Job:
    def job() -> WriteDone:
        out = uc.unblock(store, sid, num, actor=HUMAN)
        if out.noop:
            return WriteDone(f"{out.todo.id} is not blocked; nothing changed", "warning")
        return _said(out, "unblocked", "")
    return job


def set_priority(store: Store, sid: int, num: int, direction: str) -> Job:
    def job() -> WriteDone:
        out = uc.set_priority(store, sid, num, direction, actor=HUMAN)
        return _said(out, "priority", f"{out.todo.priority} priority")
    return job


def move(store: Store, sid: int, num: int, *, up: bool) -> Job:
    def job() -> WriteDone:
        out = uc.move(store, sid, num, up=up, down=not up, actor=HUMAN)
        if out.noop:
            return WriteDone(f"{out.todo.id} is already {'first' if up else 'last'} among its "
                             "neighbours; nothing changed", "warning")
        return WriteDone(f"moved {out.todo.id} {'up' if up else 'down'}")
    return job


def add(store: Store, sid: int, text: str) -> Job:
    def job() -> WriteDone:
        t = uc.add(store, sid, text, actor=HUMAN)
        return WriteDone(f"added {t.id}: {safe_line(t.content, 60)}", select=t.num)
    return job


def edit(store: Store, sid: int, num: int, text: str) -> Job:
    def job() -> WriteDone:
        out = uc.edit(store, sid, num, text, actor=HUMAN)
        if out.noop:
            return WriteDone(f"{out.todo.id} unchanged", "warning")
        return WriteDone(f"edited {out.todo.id}")
    return job


def note(store: Store, sid: int, num: int, text: str) -> Job:
    def job() -> WriteDone:
        t = uc.note(store, sid, num, text, actor=HUMAN)
        return WriteDone(f"noted on {t.id}")
    return job


def fork(store: Store, sid: int, name: str, at_n: int) -> Job:
    """Replay's "fork from here": a new session holding this one's events up to ``at_n``."""
    def job() -> WriteDone:
        from harness import replay  # the replay use cases (issue 3)

        new_sid = replay.fork(store, sid, name, at_n, actor=HUMAN)
        return WriteDone(f"forked session {safe_line(name, 40)} at event {at_n}",
                         session=new_sid)
    return job
