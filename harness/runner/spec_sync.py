"""The spec is the plan: stage todos follow the spec as it is now, not as it was.

A pipeline run binds one todo to each stage once, and its ``depends_on`` is what holds it
back. When a person edits the spec between runs, the stored todos would keep the old
plan: a dependency the spec dropped would still hold a stage back, silently.

- :func:`follow_needs` sets each stage todo's dependencies on other stages to the spec's
  ``needs``, says what changed, and keeps it in the todo's history. Dependencies on todos
  that are no stage (a person's own) are kept: a person set them.
- :func:`definition` is what a stage runs (its action, ``with:`` and ``run:``), recorded
  on each run; :func:`changed_stages` finds the completed stages whose definition has
  changed since they ran. The runner refuses those unless told what to do with them
  (:func:`apply_changes`): run them again, and the completed stages after them, or keep
  their results.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.render import safe_line
from pipeline.spec.models import Pipeline, Stage
from pipeline.stage_graph import downstream
from state.fold import RunState
from state.store import Store, Tx

__all__ = ["Change", "ChangeMode", "apply_changes", "changed_stages", "definition", "describe",
           "follow_needs"]

ChangeMode = Literal["rerun", "keep"]


def follow_needs(tx: Tx, spec: Pipeline, by_stage: dict[str, int]) -> list[str]:
    """Make every stage todo depend on the todos of its spec ``needs``; one line per change."""
    lines = []
    stage_todos = set(by_stage.values())
    for stage in spec.order():
        num = by_stage.get(stage.name)
        if num is None:
            continue
        todo = tx.state.todos[num]
        wanted = [by_stage[n] for n in stage.needs if n in by_stage]
        kept = [d for d in todo.depends_on if d not in stage_todos]  # a person's own
        new = wanted + [d for d in kept if d not in wanted]
        if new == list(todo.depends_on):
            continue
        dropped = [d for d in todo.depends_on if d not in new]
        added = [d for d in new if d not in todo.depends_on]
        tx.update_todo(num, depends_on=new)
        what = "; ".join(part for part in (
            "no longer waits on " + ", ".join(f"t{d}" for d in dropped) if dropped else "",
            "now waits on " + ", ".join(f"t{d}" for d in added) if added else "") if part)
        note = f"needs follow the spec ({', '.join(stage.needs) or 'none'}): {what}"
        tx.emit("todo.noted", todo_id=num, payload={"text": note})
        lines.append(f"[{stage.name}] t{num} {note}")
    return lines


def definition(stage: Stage) -> dict[str, Any]:
    """What a stage runs, as recorded on its run: a change to any of it changes the result."""
    return {"action": stage.action, "with": stage.params, "run": stage.run}


@dataclass
class Change:
    stage: str
    todo: int
    run: RunState
    diffs: list[str]


def _diffs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    if old.get("action") != new.get("action"):
        out.append(f"action {old.get('action')} -> {new.get('action')}")
    if old.get("run") != new.get("run"):
        out.append("run: changed")
    before, after = old.get("with") or {}, new.get("with") or {}
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            show = lambda v: safe_line(json.dumps(v, default=str), 40)  # noqa: E731
            out.append(f"with.{key} {show(before.get(key)) if key in before else '(unset)'}"
                       f" -> {show(after.get(key)) if key in after else '(unset)'}")
    return out


def changed_stages(store: Store, sid: int, spec: Pipeline, scope: Sequence[str]
                   ) -> list[Change]:
    """The completed stages in ``scope`` whose last successful run recorded a definition
    other than the spec's now (runs from before definitions were recorded are not judged)."""
    todos = {t.stage: t for t in store.todos(sid) if t.stage}
    last: dict[str, RunState] = {}
    for run in store.runs(sid):
        if run.stage and run.state == "succeeded":
            last[run.stage] = run
    out = []
    for name in scope:
        todo, run = todos.get(name), last.get(name)
        if todo is None or run is None or todo.status != "completed":
            continue
        recorded = (run.job or {}).get("definition")
        if not isinstance(recorded, dict):
            continue
        diffs = _diffs(recorded, definition(spec.stage(name)))
        if diffs:
            out.append(Change(name, todo.num, run, diffs))
    return out


def describe(changes: Sequence[Change]) -> str:
    return "; ".join(f"{c.stage} ({', '.join(c.diffs[:3])}"
                     + (f", +{len(c.diffs) - 3} more" if len(c.diffs) > 3 else "") + ")"
                     for c in changes)


def apply_changes(tx: Tx, spec: Pipeline, changes: Sequence[Change], mode: ChangeMode
                  ) -> list[str]:
    """``rerun``: the changed stages and the completed stages after them go back to
    pending; ``keep``: their results stand, and the new definition is recorded as theirs."""
    lines = []
    if mode == "keep":
        for c in changes:
            job = dict(c.run.job or {})
            job["definition"] = definition(spec.stage(c.stage))
            tx.update_run(c.run.id, job=job)
            note = f"kept r{c.run.id}'s result though the spec changed: {', '.join(c.diffs)}"
            tx.emit("todo.noted", todo_id=c.todo, payload={"text": note})
            lines.append(f"[{c.stage}] t{c.todo} {note}")
        return lines
    by_stage = {t.stage: t for t in tx.state.todos.values() if t.stage}
    again: list[str] = []
    for c in changes:
        for name in [c.stage, *downstream(spec.stages, c.stage)]:
            if name not in again:
                again.append(name)
    for name in [s.name for s in spec.order() if s.name in again]:
        todo = by_stage.get(name)
        if todo is None or todo.status != "completed":
            continue
        tx.update_todo(todo.num, status="pending")
        why = next((f"the spec changed it: {', '.join(c.diffs)}" for c in changes
                    if c.stage == name), "a stage it needs runs again")
        tx.emit("todo.noted", todo_id=todo.num, payload={"text": f"runs again: {why}"})
        lines.append(f"[{name}] t{todo.num} runs again: {why}")
    return lines
