"""The scheduling of stages: which todo runs next, how often, and what the run left.

:class:`Runner` binds one todo to each stage, then picks the next runnable one afresh each
time (so a person's reprioritisation counts), claims it and records its run in one
transaction (two runners never take the same todo), hands it to the
:class:`~harness.runner.supervise.Supervisor`, and retries it up to the stage's
``retries``. Runs a dead runner left are followed first. A server a stage left running is
stopped once no stage still to run in this run needs it, and every server when the
pipeline run ends.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from harness.errors import HarnessError, UsageError
from harness.render import safe_line
from harness.runner.ownership import ACTIVE, RUNNER, host_record, job_key, owner_alive, owner_id
from harness.runner.plan import RUNS, plan_run
from harness.runner.spec_sync import (
    ChangeMode,
    apply_changes,
    changed_stages,
    definition,
    describe,
    follow_needs,
)
from harness.runner.supervise import Outcome, Supervisor
from harness.services import live_services, stop_services, stopped_servers
from pipeline.hosts.executor import Executor
from pipeline.redact import secret_values
from pipeline.spec.models import HostSpec, Pipeline, Stage
from state import retry
from state.fold import PRIORITY_RANK, RunState, TodoState, unmet_dependencies
from state.retry import retried
from state.store import Store, Tx

__all__ = ["Outcome", "RunReport", "Runner"]


@dataclass
class RunReport:
    outcomes: list[Outcome] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # completed before this run
    blocked: list[tuple[str, str]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.blocked and not self.waiting


class Runner:
    """Drives one pipeline in one session. Not thread-safe: one runner, one thread."""

    def __init__(self, store: Store, session_id: int, spec: Pipeline, *,
                 only: str | None = None, until: str | None = None,
                 host_overrides: dict[str, str] | None = None,
                 timeouts: Mapping[str, float | None] | None = None,
                 timeout_scale: float | None = None, retry_blocked: bool = False,
                 rerun: str | None = None, changed: ChangeMode | None = None,
                 out: Callable[[str], None] = print, show_logs: bool = True,
                 poll_interval: float = 0.5):
        self.store = store
        self.sid = session_id
        self.spec = spec
        self.out = out
        self.overrides = dict(host_overrides or {})
        self.timeouts = dict(timeouts or {})
        check_overrides(spec, self.overrides, self.timeouts)
        self.retry_blocked = retry_blocked
        self.changed = changed
        #: the command that runs this pipeline again, as advice in messages
        self.rerun = rerun or f"harness run {spec.path or 'PIPELINE.yaml'}"
        self.scope = stage_scope(spec, only, until)
        # Values of secret-named variables in any host or stage env: masked in stored logs.
        secrets = sorted({v for env in [*(h.env for h in spec.hosts.values()),
                                        *(st.env for st in spec.stages)]
                          for v in secret_values(env)}, key=len, reverse=True)
        self.jobs = Supervisor(store, session_id, spec, out=out, show_logs=show_logs,
                               poll_interval=poll_interval, secrets=secrets,
                               timeouts=self.timeouts, timeout_scale=timeout_scale,
                               rerun=self.rerun)

    # -- set-up ----------------------------------------------------------------------------
    def host(self, stage: Stage) -> HostSpec:
        return stage_host(self.spec, stage, self.overrides)

    @retried
    def ensure_todos(self) -> dict[str, int]:
        """One todo per stage, created once; a person's edits to them are kept. The spec
        is the plan: a stage todo's dependencies on other stages follow the spec's
        ``needs`` as they are now (a dependency the spec dropped no longer holds it back,
        and one it added does), and each change is said and kept in the todo's history."""
        with self.store.write(self.sid, RUNNER) as tx:
            tx.set_session_pipeline(self.spec.name,
                                    str(self.spec.path) if self.spec.path else None)
            by_stage = {t.stage: t.num for t in tx.state.todos.values() if t.stage}
            for stage in self.spec.order():
                if stage.name in by_stage:
                    continue
                deps = [by_stage[n] for n in stage.needs if n in by_stage]
                t = tx.create_todo(stage.todo or stage.name, priority=stage.priority,
                                   stage=stage.name, depends_on=deps, origin="pipeline")
                by_stage[stage.name] = t.num
            for line in follow_needs(tx, self.spec, by_stage):
                self.out(line)
            return by_stage

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> RunReport:
        report = RunReport()
        todos = self.ensure_todos()
        self._follow_definitions()
        total = len(self.scope)
        self.out(f"pipeline {self.spec.name}: {total} stage(s) in scope, session todos "
                 + ", ".join(f"{s}=t{todos[s]}" for s in self.scope))
        if self.retry_blocked:
            self._unblock_scope()
        try:
            for run in self._orphans():
                report.outcomes.append(self.jobs.follow(run, self.host))
            self._revive_services()
            while True:
                picked = self._pick()
                if picked is None:
                    break
                stage, todo, run = picked
                report.outcomes.append(self._execute(stage, todo, run))
                self._release_servers()
        finally:
            # Servers that stages left running end with the pipeline run: after the last
            # stage, on a failure, and on Ctrl-C (KeyboardInterrupt passes through here).
            self._stop_services()
            self.close()
        self._summarise(report)
        return report

    @retried
    def _follow_definitions(self) -> None:
        """A completed stage whose action or ``with:`` changed in the spec since it ran is
        not silently kept: without ``--rerun-changed`` or ``--keep-changed`` the run
        refuses, naming what changed."""
        changes = changed_stages(self.store, self.sid, self.spec, self.scope)
        if not changes:
            return
        if self.changed is None:
            raise HarnessError(
                f"the spec changed {len(changes)} completed stage(s) since they ran: "
                + describe(changes),
                hint=f"`{self.rerun} --rerun-changed` runs them (and the completed stages "
                     f"after them) again; `{self.rerun} --keep-changed` keeps their results")
        with self.store.write(self.sid, RUNNER) as tx:
            for line in apply_changes(tx, self.spec, changes, self.changed):
                self.out(line)

    @retried
    def _unblock_scope(self) -> None:
        """``--retry-blocked``: the blocked todos of stages in scope go back to pending."""
        with self.store.write(self.sid, RUNNER) as tx:
            for t in sorted(tx.state.todos.values(), key=lambda t: t.num):
                if t.stage in self.scope and t.status == "blocked":
                    tx.update_todo(t.num, status="pending", blocked_reason=None)
                    tx.emit("todo.noted", todo_id=t.num, payload={
                        "text": f"unblocked by --retry-blocked (was: {t.blocked_reason})"})
                    self.out(f"[{t.stage}] t{t.num} was blocked: running it again")

    def _executor(self, host: HostSpec) -> Executor:
        return self.jobs.executor(host)

    def _stop_services(self) -> None:
        try:
            retry.run(lambda: stop_services(self.store, self.sid, executor=self._executor,
                                            stages={s.name for s in self.spec.stages},
                                            out=self.out), what="stopping the servers")
        except Exception as exc:  # never mask how the run itself ended
            self.out(f"[services] could not stop servers: {exc}")

    def _release_servers(self) -> None:
        """A server that no stage still to run in this run needs is stopped now, not when
        the run ends: its GPU memory goes to the servers after it, and a benchmark does
        not run beside idle engines. A later run that needs it starts it again
        (:meth:`_revive_services`); ``keep: true`` servers are left alone."""
        try:
            retry.run(self._release_unneeded, what="stopping servers no stage needs")
        except Exception as exc:  # never mask how the stage itself ended
            self.out(f"[services] could not stop servers: {exc}")

    def _release_unneeded(self) -> None:
        todos = [t for t in self.store.todos(self.sid) if t.stage in self.scope]
        to_run = {t.stage for t in todos if t.status in ("pending", "in_progress")}
        needed = {n for s in to_run for n in self.spec.stage(s).needs}  # type: ignore[arg-type]
        idle = {run.stage for run, record in live_services(self.store, self.sid)
                if not record.keep and run.stage in self.scope and run.stage not in needed
                and run.stage not in to_run}
        if idle:
            for line in stop_services(self.store, self.sid, executor=self._executor,
                                      stages=idle, out=lambda _line: None):
                self.out(f"[services] {line} (no stage still to run needs it)")

    @retried
    def _revive_services(self) -> None:
        """A completed stage whose server the harness has since stopped runs again when a
        stage in scope that needs it is still to run (a re-run after a blocked benchmark,
        or ``--only benchmark``): its todo goes back to pending, and into the scope."""
        stopped = stopped_servers(self.store.runs(self.sid))
        if not stopped:
            return
        # only for a stage that will run: one held back by a blocked stage would have its
        # servers started for nothing, and stopped again at the end
        will_run = {row.stage for row in plan_run(self.store, self.sid, self.spec, self.scope,
                                                  retry_blocked=self.retry_blocked)
                    if row.verdict in RUNS}
        revived: set[str] = set()
        with self.store.write(self.sid, RUNNER) as tx:
            by_stage = {t.stage: t for t in tx.state.todos.values() if t.stage}
            for stage in self.spec.order():
                t, r = by_stage.get(stage.name), stopped.get(stage.name)
                if t is None or r is None or t.status != "completed":
                    continue
                waiting = [s for s in self.scope if stage.name in self.spec.stage(s).needs
                           and s in by_stage and by_stage[s].status in ("pending",
                                                                         "in_progress")
                           and s in will_run]
                if not waiting:
                    continue
                tx.update_todo(t.num, status="pending")
                note = (f"its server (r{r.id}) was stopped when an earlier run ended; "
                        f"starting it again for {', '.join(waiting)}")
                tx.emit("todo.noted", todo_id=t.num, payload={"text": note})
                self.out(f"[{stage.name}] t{t.num} {note}")
                revived.add(stage.name)
        if revived - set(self.scope):
            wanted = set(self.scope) | revived
            self.scope = [s.name for s in self.spec.order() if s.name in wanted]

    def close(self) -> None:
        self.jobs.close()

    def _summarise(self, report: RunReport) -> None:
        todos = {t.num: t for t in self.store.todos(self.sid)}
        by_stage = {t.stage: t for t in todos.values() if t.stage}
        for name in self.scope:
            t = by_stage.get(name)
            if t is None:
                continue
            if t.status == "completed":
                report.completed.append(name)
            elif t.status == "blocked":
                report.blocked.append((name, t.blocked_reason or ""))
            elif t.status != "cancelled":
                waits = unmet_dependencies(t, todos)
                why = ("waiting on " + ", ".join(f"t{d}" for d in waits)) if waits else t.status
                report.waiting.append(f"{name} ({why})")
        ran = {o.stage for o in report.outcomes}
        report.skipped = [n for n in report.completed if n not in ran]
        self.out(f"done: {len(report.completed)}/{len(self.scope)} completed"
                 + (f", {len(report.blocked)} blocked" if report.blocked else "")
                 + (f", {len(report.waiting)} not run" if report.waiting else ""))
        if report.skipped:
            every = len(report.skipped) == len(report.completed)
            self.out(f"  skipped, completed by an earlier run: {', '.join(report.skipped)}"
                     + (" (nothing left to run)" if every and report.ok else ""))
        # What each completed stage left, in its own words (the drafter, its accuracy...).
        last: dict[str, RunState] = {}
        for run in self.store.runs(self.sid):
            if run.stage in report.completed and run.state == "succeeded":
                last[run.stage] = run
        for name in report.completed:
            summary = (last[name].result or {}).get("summary") if name in last else None
            if summary:
                self.out(f"  {safe_line(str(summary), 400)}")
        hosts = {self.host(self.spec.stage(n)).name: self.host(self.spec.stage(n))
                 for n in self.scope}
        for host in hosts.values():
            if host.workdir:
                self.out(f"  files on {host.label}: {host.workdir}")
        for name, why in report.blocked:
            self.out(f"  blocked {name}: {safe_line(why, 300)}")
        for line in report.waiting:
            self.out(f"  not run {line}")
        if report.blocked:
            # "Run it again and it resumes" skips blocked stages: say what runs them.
            self.out(f"  to run the blocked stage{'s' if len(report.blocked) > 1 else ''} "
                     f"again once the cause is fixed: {self.rerun} --retry-blocked")

    @retried
    def _pick(self) -> tuple[Stage, TodoState, RunState] | None:
        """Choose and claim the next todo in one transaction: two runners never take one."""
        with self.store.write(self.sid, RUNNER) as tx:
            runs = tx.load_runs()
            busy = {r.todo_id for r in runs.values() if r.state in ACTIVE}
            todos = tx.state.todos
            candidates = []
            for t in todos.values():
                if t.stage not in self.scope or t.num in busy:
                    continue
                if t.status not in ("pending", "in_progress"):
                    continue  # blocked, completed or cancelled by someone: skip
                if unmet_dependencies(t, todos):
                    continue
                candidates.append(t)
            if not candidates:
                return None
            todo = min(candidates, key=lambda t: (PRIORITY_RANK[t.priority], t.position, t.num))
            stage = self.spec.stage(todo.stage)  # type: ignore[arg-type]
            tx.update_todo(todo.num, status="in_progress", blocked_reason=None)
            run = self._queue(tx, stage, todo.num, attempt=1)
            return stage, tx.todo(todo.num), run

    def _queue(self, tx: Tx, stage: Stage, todo: int, attempt: int) -> RunState:
        host = self.host(stage)
        run = tx.queue_run(todo_id=todo, host=host.name, stage=stage.name, attempt=attempt)
        key = job_key(self.store, run.id)
        tx.update_run(run.id, job={"key": key, "host": host_record(host),
                                   "definition": definition(stage)}, owner=owner_id())
        return tx.state.runs[run.id]

    def _execute(self, stage: Stage, todo: TodoState, run: RunState) -> Outcome:
        retries = stage.retries if stage.retries is not None else self.spec.defaults.retries
        while True:
            outcome = self.jobs.attempt(stage, self.host(stage), todo.num, run)
            if outcome.completed or outcome.state in ("cancelled", "lost") \
                    or run.attempt > retries:
                self.jobs.finish_todo(todo.num, outcome)
                return outcome
            self.out(f"[{stage.name}] attempt {run.attempt} failed ({outcome.reason}); "
                     f"retrying ({run.attempt}/{retries} retries used)")
            run = self._requeue(stage, todo.num, run.attempt + 1)

    @retried
    def _requeue(self, stage: Stage, todo: int, attempt: int) -> RunState:
        with self.store.write(self.sid, RUNNER) as tx:
            return self._queue(tx, stage, todo, attempt=attempt)

    # -- runs left behind by a runner that died ---------------------------------------------
    @retried
    def _orphans(self) -> list[RunState]:
        """Claim the session's active runs whose runner is gone."""
        claimed = []
        with self.store.write(self.sid, RUNNER) as tx:
            for run in tx.load_runs().values():
                if run.state not in ACTIVE or owner_alive(run.owner):
                    continue
                tx.update_run(run.id, owner=owner_id())
                claimed.append(tx.state.runs[run.id])
        return claimed


def stage_scope(spec: Pipeline, only: str | None, until: str | None) -> list[str]:
    """The stages a run covers, in order: all, ``--only`` one, or ``--until`` one and
    what it needs."""
    if only and until:
        raise UsageError("say --only or --until, not both")
    if only:
        return [stage_named(spec, only).name]
    if until:
        wanted: set[str] = set()
        stack = [stage_named(spec, until).name]
        while stack:
            name = stack.pop()
            if name not in wanted:
                wanted.add(name)
                stack.extend(spec.stage(name).needs)
        return [s.name for s in spec.order() if s.name in wanted]
    return [s.name for s in spec.order()]


def check_overrides(spec: Pipeline, hosts: Mapping[str, str],
                    timeouts: Mapping[str, float | None]) -> None:
    """``--host-override`` and ``--timeout`` name stages (and hosts) the spec has."""
    for stage, host in hosts.items():
        stage_named(spec, stage)
        if host not in spec.hosts:
            raise UsageError(f"--host-override {stage}={host}: unknown host {host!r} "
                             f"(known: {', '.join(sorted(spec.hosts))})")
    for stage in timeouts:
        try:
            stage_named(spec, stage)
        except UsageError as exc:
            raise UsageError(f"--timeout {stage}=...: {exc.message}") from None


def stage_host(spec: Pipeline, stage: Stage, overrides: Mapping[str, str]) -> HostSpec:
    name = overrides.get(stage.name)
    return spec.hosts[name] if name else spec.host_for(stage)


def stage_named(spec: Pipeline, name: str) -> Stage:
    try:
        return spec.stage(name)
    except KeyError:
        names = [s.name for s in spec.stages]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"no stage named {name!r} in {spec.name}{hint} (stages: "
                         f"{', '.join(names)})") from None
