"""What ``harness run --dry-run`` says: what a real run would do now, stage by stage.

The same decisions the scheduler makes, without making them: a completed stage is
skipped, a blocked or cancelled one is not run (``--retry-blocked`` runs blocked ones), a
stage whose dependency will not complete waits, a run left by a runner that stopped is
re-attached, and everything else runs, in order. Nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.runner.ownership import ACTIVE, owner_alive
from harness.services import stopped_servers
from pipeline.spec.models import Pipeline
from state.fold import RunState, TodoState
from state.store import Store

RUNS = ("run", "re-attach")  # the verdicts under which a stage will (probably) complete


@dataclass
class PlanRow:
    stage: str
    todo: str | None   # "t7", or None when a real run would create the todo
    verdict: str       # run | re-attach | skip | blocked | cancelled | waiting | running
    why: str


def plan_run(store: Store | None, session_id: int | None, spec: Pipeline, scope: list[str],
             *, retry_blocked: bool = False) -> list[PlanRow]:
    todos: dict[int, TodoState] = {}
    runs: list[RunState] = []
    if store is not None and session_id is not None:
        todos = {t.num: t for t in store.todos(session_id)}
        runs = store.runs(session_id)
    by_stage = {t.stage: t for t in todos.values() if t.stage}
    # A dependency of a todo the runner does not create yet is its stage's todo.
    will_complete: set[str] = {s for s, t in by_stage.items() if t.status == "completed"}
    rows: list[PlanRow] = []
    for stage in spec.order():
        if stage.name not in scope:
            continue
        t = by_stage.get(stage.name)
        row = _judge(stage.name, t, todos, by_stage, runs, will_complete, retry_blocked,
                     needs=stage.needs)
        if row.verdict in RUNS:
            will_complete.add(stage.name)
        rows.append(row)
    _servers_again(spec, rows, runs)
    return rows


def _judge(name: str, t: TodoState | None, todos: dict[int, TodoState],
           by_stage: dict[str | None, TodoState], runs: list[RunState], will_complete: set[str],
           retry_blocked: bool, *, needs: list[str]) -> PlanRow:
    if t is None:
        unmet = [n for n in needs if n not in will_complete]
        if unmet:
            return PlanRow(name, None, "waiting", "needs " + ", ".join(unmet)
                           + " (not completed, and not run by this run)")
        return PlanRow(name, None, "run", "a new todo")
    active = [r for r in runs if r.todo_id == t.num and r.state in ACTIVE]
    if active:
        r = active[-1]
        if owner_alive(r.owner):
            return PlanRow(name, t.id, "running", f"r{r.id} is {r.state} under another "
                                                  f"runner ({r.owner}): left to it")
        return PlanRow(name, t.id, "re-attach", f"r{r.id} was left {r.state} by a runner "
                                                "that stopped")
    if t.status == "completed":
        return PlanRow(name, t.id, "skip", "completed")
    if t.status == "cancelled":
        return PlanRow(name, t.id, "cancelled", "cancelled by a person: not run")
    if t.status == "blocked" and not retry_blocked:
        return PlanRow(name, t.id, "blocked", f"{t.blocked_reason or 'blocked'} (not run; "
                                              "--retry-blocked runs it)")
    stage_of = {x.num: x.stage for x in todos.values()}
    # the spec is the plan: a run first makes stage todos depend on the spec's needs
    # (spec_sync.follow_needs); a person's own dependencies stay
    deps = [by_stage[n].num for n in needs if by_stage.get(n) is not None] + \
        [d for d in t.depends_on if stage_of.get(d) is None]
    unmet = [d for d in deps if d in todos and todos[d].status != "completed"
             and stage_of.get(d) not in will_complete]
    if unmet:
        return PlanRow(name, t.id, "waiting", "waits on " + ", ".join(
            f"t{d} ({todos[d].status})" for d in unmet))
    why = "blocked: runs again (--retry-blocked)" if t.status == "blocked" else t.status
    return PlanRow(name, t.id, "run", why)


def _servers_again(spec: Pipeline, rows: list[PlanRow], runs: list[RunState]) -> None:
    """A completed serve stage whose server was stopped runs again when a stage that
    needs it runs (as the scheduler's ``_revive_services`` does)."""
    stopped = stopped_servers(runs)
    running = {r.stage for r in rows if r.verdict in RUNS}
    for row in rows:
        if row.verdict != "skip" or row.stage not in stopped:
            continue
        users = [s.name for s in spec.stages if row.stage in s.needs and s.name in running]
        if users:
            row.verdict, row.why = "run", f"its server was stopped; {', '.join(users)} needs it"
