"""The runner: todos that run their own actions, and evidence that decides their status.

``harness run PIPELINE.yaml`` binds one todo to each stage (once; re-running reuses them)
and repeats: pick the next runnable todo (dependencies completed, not blocked, highest
priority, then position; chosen afresh each time, so a person's reprioritisation counts),
mark it in progress and record the run (one transaction, so two runners never take the
same todo), ship the code if the host needs it, start the stage as a detached job, stream
its log into the store, and wait. Exit 0 *and* the stage's checks and gate passing
complete the todo; anything else blocks it with the measured reason, after ``retries``.

Runs outlive the runner. A run left ``running`` or ``queued`` by a runner that died is
re-attached on the next start from the files on the host (the job is never launched
twice), or marked ``lost`` if its process vanished without an exit code.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, UsageError
from harness.gates import gate_items
from harness.paths import data_dir
from harness.render import safe_line
from harness.services import service_of, service_stopped, stop_service, stop_services
from pipeline.actions import StageResult
from pipeline.errors import ExecutorError, HostUnreachable, JobError, PipelineError
from pipeline.executor import Executor, JobHandle, JobStatus, executor_for
from pipeline.redact import secret_values
from pipeline.ship import code_env, ensure_shipped, package_hash
from pipeline.spec import HostSpec, Pipeline, Stage
from state.fold import PRIORITY_RANK, RUN_FINAL, RunState, TodoState, unmet_dependencies
from state.store import Store, Tx, utcnow

RUNNER = "runner"
ACTIVE = ("queued", "running")
LOG_FLUSH_BYTES = 64 * 1024
LOG_FLUSH_SECONDS = 1.0


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str | None) -> bool:
    """Is the runner that claimed a run still alive? Only answerable on the same machine;
    a runner elsewhere is assumed alive (its host is not ours to judge)."""
    if not owner or owner == owner_id():
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive (pid 1 here may never reap it)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return True


def job_key(store: Store, run_id: int) -> str:
    """The run's directory name on the host: unique across stores sharing a workdir."""
    return f"{store.store_id[:8]}-r{run_id}"


def host_record(host: HostSpec) -> dict[str, Any]:
    """What a later process needs to reach the host again. Never the env: it may hold
    secrets, and the job has its environment already."""
    return host.model_dump(exclude={"env"}, mode="json")


def evaluate_gate(gate: dict[str, Any], metrics: dict[str, Any]) -> tuple[bool, list[str]]:
    """Returns (passed, one line per threshold)."""
    items = gate_items(gate, metrics)
    return all(i.passed for i in items), [i.line for i in items]


def gate_reason(gate: dict[str, Any], result: StageResult | None) -> str:
    """Why a gate failed, numbers first: the action's own summary (for eagle3.verify
    ``acceptance 15% (τ 1.17) at k=3; pos1 40%; projected 0.66x``), then what the gate
    needs of each failing metric and what was measured."""
    metrics = result.metrics if result is not None else {}
    failing = [i.needs for i in gate_items(gate, metrics) if not i.passed]
    head = _headline(result.summary) if result is not None else ""
    return "gate failed: " + (f"{head}; " if head else "") + "gate needs " + ", ".join(failing)


def _headline(summary: str) -> str:
    """A summary without the list of failed checks the reason carries anyway."""
    return summary.split("; failed: ")[0].split("; all checks passed")[0].strip()


@dataclass
class Outcome:
    stage: str
    todo: int
    run: int
    state: str
    completed: bool
    reason: str | None = None


@dataclass
class RunReport:
    outcomes: list[Outcome] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
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
                 out: Callable[[str], None] = print, show_logs: bool = True,
                 poll_interval: float = 0.5):
        self.store = store
        self.sid = session_id
        self.spec = spec
        self.out = out
        self.show_logs = show_logs
        self.poll_interval = poll_interval
        self.overrides = dict(host_overrides or {})
        for stage, host in self.overrides.items():
            _stage(spec, stage)
            if host not in spec.hosts:
                raise UsageError(f"--host-override {stage}={host}: unknown host {host!r} "
                                 f"(known: {', '.join(sorted(spec.hosts))})")
        self.scope = self._scope(only, until)
        self._executors: dict[str, Executor] = {}
        self._shipped: dict[str, str] = {}
        # Values of secret-named variables in any host or stage env: masked in stored logs.
        self._secrets = sorted({v for env in [*(h.env for h in spec.hosts.values()),
                                              *(st.env for st in spec.stages)]
                                for v in secret_values(env)}, key=len, reverse=True)

    # -- set-up ----------------------------------------------------------------------------
    def _scope(self, only: str | None, until: str | None) -> list[str]:
        if only and until:
            raise UsageError("say --only or --until, not both")
        if only:
            return [_stage(self.spec, only).name]
        if until:
            wanted: set[str] = set()
            stack = [_stage(self.spec, until).name]
            while stack:
                name = stack.pop()
                if name not in wanted:
                    wanted.add(name)
                    stack.extend(self.spec.stage(name).needs)
            return [s.name for s in self.spec.order() if s.name in wanted]
        return [s.name for s in self.spec.order()]

    def host(self, stage: Stage) -> HostSpec:
        name = self.overrides.get(stage.name)
        return self.spec.hosts[name] if name else self.spec.host_for(stage)

    def ensure_todos(self) -> dict[str, int]:
        """One todo per stage, created once; a person's edits to them are kept."""
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
            return by_stage

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> RunReport:
        report = RunReport()
        todos = self.ensure_todos()
        total = len(self.scope)
        self.out(f"pipeline {self.spec.name}: {total} stage(s) in scope, session todos "
                 + ", ".join(f"{s}=t{todos[s]}" for s in self.scope))
        try:
            for run in self._orphans():
                report.outcomes.append(self._follow_existing(run))
            self._revive_services()
            while True:
                picked = self._pick()
                if picked is None:
                    break
                stage, todo, run = picked
                outcome = self._execute(stage, todo, run)
                report.outcomes.append(outcome)
        finally:
            # Servers that stages left running end with the pipeline run: after the last
            # stage, on a failure, and on Ctrl-C (KeyboardInterrupt passes through here).
            self._stop_services()
            self.close()
        self._summarise(report)
        return report

    def _stop_services(self) -> None:
        try:
            stop_services(self.store, self.sid, executor=self._executor,
                          stages={s.name for s in self.spec.stages}, out=self.out)
        except Exception as exc:  # never mask how the run itself ended
            self.out(f"[services] could not stop servers: {exc}")

    def _revive_services(self) -> None:
        """A completed stage whose server the harness has since stopped runs again when a
        stage in scope that needs it is still to run (a re-run after a blocked benchmark,
        or ``--only benchmark``): its todo goes back to pending, and into the scope."""
        latest: dict[str, RunState] = {}
        for r in self.store.runs(self.sid):
            if r.state == "succeeded" and r.stage:
                latest[r.stage] = r
        revived: set[str] = set()
        with self.store.write(self.sid, RUNNER) as tx:
            by_stage = {t.stage: t for t in tx.state.todos.values() if t.stage}
            for stage in self.spec.order():
                t, r = by_stage.get(stage.name), latest.get(stage.name)
                if t is None or r is None or t.status != "completed" \
                        or service_of(r) is None or not service_stopped(r):
                    continue
                waiting = [s for s in self.scope if stage.name in self.spec.stage(s).needs
                           and s in by_stage and by_stage[s].status in ("pending",
                                                                         "in_progress")]
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
        for ex in self._executors.values():
            ex.close()
        self._executors.clear()

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
        self.out(f"done: {len(report.completed)}/{len(self.scope)} completed"
                 + (f", {len(report.blocked)} blocked" if report.blocked else "")
                 + (f", {len(report.waiting)} not run" if report.waiting else ""))
        # What each completed stage left, in its own words (the drafter, its accuracy...).
        last: dict[str, RunState] = {}
        for run in self.store.runs(self.sid):
            if run.stage in report.completed and run.state == "succeeded":
                last[run.stage] = run
        for name in report.completed:
            summary = (last[name].result or {}).get("summary") if name in last else None
            if summary:
                self.out(f"  {safe_line(str(summary), 200)}")
        hosts = {self.host(self.spec.stage(n)).name: self.host(self.spec.stage(n))
                 for n in self.scope}
        for host in hosts.values():
            if host.workdir:
                self.out(f"  files on {host.label}: {host.workdir}")
        for name, why in report.blocked:
            self.out(f"  blocked {name}: {safe_line(why, 200)}")
        for line in report.waiting:
            self.out(f"  not run {line}")

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
        tx.update_run(run.id, job={"key": key, "host": host_record(host)}, owner=owner_id())
        return tx.state.runs[run.id]

    # -- running one stage -----------------------------------------------------------------
    def _executor(self, host: HostSpec) -> Executor:
        if host.name not in self._executors:
            self._executors[host.name] = executor_for(host, self.spec.hosts)
        return self._executors[host.name]

    def _execute(self, stage: Stage, todo: TodoState, run: RunState) -> Outcome:
        retries = stage.retries if stage.retries is not None else self.spec.defaults.retries
        while True:
            outcome = self._attempt(stage, todo.num, run)
            if outcome.completed or outcome.state in ("cancelled", "lost") \
                    or run.attempt > retries:
                self._finish_todo(todo.num, outcome)
                return outcome
            self.out(f"[{stage.name}] attempt {run.attempt} failed ({outcome.reason}); "
                     f"retrying ({run.attempt}/{retries} retries used)")
            with self.store.write(self.sid, RUNNER) as tx:
                run = self._queue(tx, stage, todo.num, attempt=run.attempt + 1)

    def _attempt(self, stage: Stage, todo: int, run: RunState) -> Outcome:
        host = self.host(stage)
        key = run.job["key"] if run.job else job_key(self.store, run.id)
        try:
            ex = self._executor(host)
            # HARNESS_PYTHON: the host's interpreter (the one built-in actions use), so a
            # `run:` stage can reach the same packages without knowing where they live.
            env = stage.env_for(host, {"HARNESS_RUN_ID": f"r{run.id}",
                                       "HARNESS_STAGE": stage.name,
                                       "HARNESS_PYTHON": host.python})
            code_hash = None
            if stage.is_builtin:
                code_hash, env = self._code(ex, host, env)
            result_path = f"{ex.run_dir(key)}/result.json"
            argv = stage.command(host, result_path=result_path)
            handle = ex.start_detached(key, argv, env=env)
        except PipelineError as exc:
            return self._end(stage, todo, run.id, "failed", None,
                             f"could not start on {host.label}: {exc}")
        how = "re-attached to" if handle.attached else "started"
        self.out(f"[{stage.name}] t{todo} {how} r{run.id} on {host.label} "
                 f"(attempt {run.attempt}, pid {handle.pid})")
        with self.store.write(self.sid, RUNNER) as tx:
            tx.update_run(run.id, state="running", pid=handle.pid, run_dir=handle.run_dir,
                          command=handle.command, code_hash=code_hash,
                          started_at=run.started_at or utcnow())
        timeout = stage.timeout if stage.timeout is not None else self.spec.defaults.timeout
        return self._watch(stage, todo, run.id, ex, handle, timeout)

    def _code(self, ex: Executor, host: HostSpec, env: dict[str, str]
              ) -> tuple[str, dict[str, str]]:
        """Built-in actions run the harness's own ``pipeline`` package: shipped to SSH hosts
        (only when the host lacks this content hash); used in place locally."""
        if not host.is_ssh:
            digest = self._shipped.get(host.name) or package_hash()
            self._shipped[host.name] = digest
            root = str(Path(__file__).resolve().parent.parent)
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
            return digest, {**env, "PYTHONPATH": path}
        if host.name not in self._shipped:
            digest, shipped = ensure_shipped(ex)
            self._shipped[host.name] = digest
            self.out(f"[{host.name}] pipeline code {digest[:12]} "
                     f"{'shipped' if shipped else 'already there'}")
        digest = self._shipped[host.name]
        code = code_env(ex.workdir, digest)
        if env.get("PYTHONPATH"):  # the host's own path (e.g. its packages) after ours
            code["PYTHONPATH"] += ":" + env["PYTHONPATH"]
        return digest, {**env, **code}

    def _watch(self, stage: Stage, todo: int, run_id: int, ex: Executor, handle: JobHandle,
               timeout: float | None) -> Outcome:
        offset = self._stored_log_end(run_id)
        pending = b""
        buffered: list[tuple[int, str]] = []
        last_flush = time.monotonic()
        started = time.monotonic()
        status: JobStatus
        while True:
            status = ex.poll(handle)
            offset, pending, chunk = self._read_log(ex, handle, offset, pending)
            if chunk is not None:
                buffered.append(chunk)
                if self.show_logs:
                    for line in chunk[1].splitlines():
                        self.out(f"  {stage.name} | {safe_line(line, 300)}")
            due = time.monotonic() - last_flush >= LOG_FLUSH_SECONDS
            if buffered and (due or status.finished
                             or sum(len(c[1]) for c in buffered) > LOG_FLUSH_BYTES):
                self._flush_log(run_id, buffered)
                buffered, last_flush = [], time.monotonic()
            if status.finished:
                break
            if self._stopped_by_person(run_id, todo):
                ex.cancel(handle)
                continue
            if timeout is not None and time.monotonic() - started > timeout:
                ex.cancel(handle)
                self._flush_log(run_id, buffered)
                result = self._result(ex, handle) if stage.is_builtin else None
                return self._end(stage, todo, run_id, "failed", None,
                                 f"timed out after {timeout:g}s; the job was cancelled"
                                 + self._partial(result), result)
            time.sleep(self.poll_interval)
        # Whatever the job wrote after our last read.
        while True:
            before = offset
            offset, pending, chunk = self._read_log(ex, handle, offset, pending, final=True)
            if chunk is not None:
                self._flush_log(run_id, [chunk])
                if self.show_logs:
                    for line in chunk[1].splitlines():
                        self.out(f"  {stage.name} | {safe_line(line, 300)}")
            if offset == before:
                break
        return self._conclude(stage, todo, run_id, ex, handle, status)

    def _read_log(self, ex: Executor, handle: JobHandle, offset: int, pending: bytes,
                  final: bool = False) -> tuple[int, bytes, tuple[int, str] | None]:
        data, _next = ex.tail(handle, offset + len(pending))
        data = pending + data
        if not data:
            return offset, b"", None
        # Store whole UTF-8 characters only, so byte offsets and text agree.
        cut = len(data) if final else _utf8_boundary(data)
        text = _mask(data[:cut].decode("utf-8", errors="replace"), self._secrets)
        return offset + cut, data[cut:], (offset, text) if text else None

    def _flush_log(self, run_id: int, chunks: Iterable[tuple[int, str]]) -> None:
        chunks = list(chunks)
        if not chunks:
            return
        with self.store.write(self.sid, RUNNER) as tx:
            for start, text in chunks:
                tx.append_log(run_id, start, text)

    def _stored_log_end(self, run_id: int) -> int:
        _text, end = self.store.log(run_id, 0)
        return end

    def _stopped_by_person(self, run_id: int, todo: int) -> bool:
        """A person cancelled the todo (or the run, from another terminal)."""
        try:
            t = self.store.todo(self.sid, todo)
        except HarnessError:
            return False
        if t.status == "cancelled":
            return True
        _sid, run = self.store.run(run_id)
        return run.state == "cancelled"

    def _conclude(self, stage: Stage, todo: int, run_id: int, ex: Executor,
                  handle: JobHandle, status: JobStatus) -> Outcome:
        if status.state == "lost":
            return self._end(stage, todo, run_id, "lost", None,
                             "job lost: its process vanished without an exit code "
                             "(host rebooted, or the process was killed)")
        if status.state == "cancelled":
            result = self._result(ex, handle) if stage.is_builtin else None
            return self._end(stage, todo, run_id, "cancelled", status.exit_code,
                             f"run r{run_id} was cancelled" + self._partial(result), result)
        result = self._result(ex, handle) if stage.is_builtin else None
        # An action that ran to the end but whose own checks failed exits 1 too; its
        # checks are the reason, and they are evidence worth a verification row.
        checked = result is not None and result.error is None and \
            any(not c.passed for c in result.checks)
        if status.exit_code != 0 and not checked:
            last = self._last_error_line(run_id)
            why = f"exit code {status.exit_code}"
            if result is not None and result.error:
                why += f": {result.error}"
            elif last:
                why += f": {last}"
            return self._end(stage, todo, run_id, "failed", status.exit_code, why, result)
        problems: list[str] = []
        if stage.is_builtin and result is None:
            problems.append("the action wrote no result file")
        if result is not None:
            failed = [c for c in result.checks if not c.passed]
            problems += [f"check {c.name} failed: {c.value} (expected {c.expected})"
                         + (f" - {c.message}" if c.message else "") for c in failed]
            named = {c.name for c in result.checks}
            problems += [f"check {name} was not reported by the action"
                         for name in stage.checks if name not in named]
        elif stage.checks:
            problems.append(f"checks {', '.join(stage.checks)} need a built-in action")
        missing = self._missing_outputs(ex, stage)
        problems += [f"output {p} is missing" for p in missing]
        gate_ok, gate_lines = evaluate_gate(stage.gate, result.metrics if result else {})
        if stage.gate and not gate_ok:
            # The measured numbers lead the reason: they are what a person acts on.
            problems.insert(0, gate_reason(stage.gate, result))
        self._record_verification(stage, todo, run_id, result, gate_ok, gate_lines)
        if problems:
            return self._end(stage, todo, run_id, "failed", status.exit_code,
                             "; ".join(problems), result)
        summary = _headline(result.summary) if result else ""
        note = (f"{summary}; " if summary else "") + "gate passed: " + "; ".join(gate_lines) \
            if stage.gate else (result.summary if result else "")
        return self._end(stage, todo, run_id, "succeeded", 0, note or None, result)

    @staticmethod
    def _partial(result: StageResult | None) -> str:
        """What an interrupted action still reported (e.g. a benchmark's partial figures)."""
        return f"; the action said: {result.error}" if result is not None and result.error \
            else ""

    def _result(self, ex: Executor, handle: JobHandle) -> StageResult | None:
        try:
            raw = ex.read_bytes(f"{handle.run_dir}/result.json")
        except (ExecutorError, JobError):
            return None
        try:
            return StageResult.from_json(json.loads(raw))
        except (ValueError, TypeError, KeyError):
            return None

    def _missing_outputs(self, ex: Executor, stage: Stage) -> list[str]:
        if not stage.outputs:
            return []
        script = 'for p in "$@"; do [ -e "$p" ] || printf "%s\\n" "$p"; done'
        r = ex.run(["sh", "-c", script, "sh", *stage.outputs], warn=True)
        return [line for line in r.stdout.splitlines() if line]

    def _last_error_line(self, run_id: int) -> str | None:
        text, _ = self.store.log(run_id, 0)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        for ln in reversed(lines):
            if "error" in ln.lower() or "exception" in ln.lower() or "traceback" in ln.lower():
                return safe_line(ln, 240)
        return safe_line(lines[-1], 240) if lines else None

    def _record_verification(self, stage: Stage, todo: int, run_id: int,
                             result: StageResult | None, gate_ok: bool,
                             gate_lines: list[str]) -> None:
        if result is None or not (result.checks or stage.gate):
            return
        passed = result.ok and (gate_ok or not stage.gate)
        verdict = ((f"{_headline(result.summary)}; " if _headline(result.summary) else "")
                   + f"gate {'passed' if gate_ok else 'failed'}: " + "; ".join(gate_lines)
                   ) if stage.gate else (result.summary or ("all checks passed" if passed
                                                            else "checks failed"))
        artifact = result.artifacts[0] if result.artifacts else None
        with self.store.write(self.sid, RUNNER) as tx:
            tx.record_verification(
                todo_id=todo, run_id=run_id, kind=stage.action or "run", artifact=artifact,
                sha256=result.metrics.get("sha256") if isinstance(
                    result.metrics.get("sha256"), str) else None,
                passed=passed, verdict=verdict, checks=[c.to_json() for c in result.checks],
                metrics=result.metrics, gate=dict(stage.gate))

    def _end(self, stage: Stage, todo: int, run_id: int, state: str, exit_code: int | None,
             reason: str | None, result: StageResult | None = None) -> Outcome:
        with self.store.write(self.sid, RUNNER) as tx:
            current = tx.load_runs()[run_id]
            if current.state == "cancelled" and state != "cancelled":
                state = "cancelled"  # someone cancelled it while we watched
                reason = current.reason or reason
            tx.update_run(run_id, state=state, exit_code=exit_code, reason=reason,
                          ended_at=utcnow(),
                          result=result.to_json() if result is not None else current.result)
        completed = state == "succeeded"
        mark = "completed" if completed else state
        self.out(f"[{stage.name}] r{run_id} {mark}" + (f": {safe_line(reason, 300)}"
                                                     if reason else ""))
        return Outcome(stage=stage.name, todo=todo, run=run_id, state=state,
                       completed=completed, reason=reason)

    def _finish_todo(self, todo: int, outcome: Outcome) -> None:
        with self.store.write(self.sid, RUNNER) as tx:
            t = tx.todo(todo)
            if t.status != "in_progress":
                return  # a person decided meanwhile (done, cancelled, blocked): theirs stands
            if outcome.completed:
                tx.update_todo(todo, status="completed")
                gated = outcome.stage in {s.name for s in self.spec.stages} and \
                    bool(self.spec.stage(outcome.stage).gate)
                if gated and outcome.reason:
                    # The numbers that let it through stay on the todo itself.
                    tx.emit("todo.noted", todo_id=todo,
                            payload={"text": f"r{outcome.run} {outcome.reason}"})
            else:
                tx.update_todo(todo, status="blocked",
                               blocked_reason=f"r{outcome.run} {outcome.state}: "
                                              f"{outcome.reason or 'no reason recorded'}")

    # -- runs left behind by a runner that died ---------------------------------------------
    def _orphans(self) -> list[RunState]:
        """Claim the session's active runs whose runner is gone."""
        claimed = []
        with self.store.write(self.sid, RUNNER) as tx:
            for run in tx.load_runs().values():
                if run.state not in ACTIVE or _owner_alive(run.owner):
                    continue
                tx.update_run(run.id, owner=owner_id())
                claimed.append(tx.state.runs[run.id])
        return claimed

    def _follow_existing(self, run: RunState) -> Outcome:
        """Re-attach to a run a dead runner left, or settle how it ended."""
        stage = self.spec.stage(run.stage) if run.stage in {s.name for s in self.spec.stages} \
            else None
        host = HostSpec(**run.job["host"]) if run.job else None
        if stage is None or host is None or run.todo_id is None:
            return self._settle_unknown(run, host)
        key = run.job["key"] if run.job else job_key(self.store, run.id)
        try:
            ex = self._executor(host)
            handle = ex.attach(key)
        except HostUnreachable as exc:
            raise HarnessError(f"cannot reach {host.label} to re-attach run r{run.id} "
                               f"({stage.name}): {exc.message}") from None
        if handle is None:
            if run.state == "queued":
                self.out(f"[{stage.name}] r{run.id} was queued but never started: starting it")
                outcome = self._attempt(stage, run.todo_id, run)
            else:
                outcome = self._end(stage, run.todo_id, run.id, "lost", None,
                                    "job lost: its run directory is gone from the host")
        else:
            self.out(f"[{stage.name}] re-attached to r{run.id} (pid {handle.pid}), left by "
                     "a runner that stopped")
            timeout = stage.timeout if stage.timeout is not None else self.spec.defaults.timeout
            outcome = self._watch(stage, run.todo_id, run.id, ex, handle, timeout)
        self._finish_todo(run.todo_id, outcome)
        return outcome

    def _settle_unknown(self, run: RunState, host: HostSpec | None) -> Outcome:
        """A run of a stage this spec does not have: find out how it ended, nothing more."""
        state, code, reason = "lost", None, "its stage is not in this pipeline, and its job " \
                                            "cannot be found"
        if host is not None and run.job:
            try:
                ex = self._executor(host)
                handle = ex.attach(run.job["key"])
                if handle is not None:
                    st = ex.poll(handle)
                    if not st.finished:
                        return Outcome(run.stage or "?", run.todo_id or 0, run.id, "running",
                                       False, "still running (stage not in this pipeline)")
                    state, code, reason = st.state, st.exit_code, None
            except PipelineError as exc:
                reason = f"cannot check: {exc}"
        with self.store.write(self.sid, RUNNER) as tx:
            tx.update_run(run.id, state=state, exit_code=code, reason=reason, ended_at=utcnow())
        return Outcome(run.stage or "?", run.todo_id or 0, run.id, state, False, reason)


def _stage(spec: Pipeline, name: str) -> Stage:
    try:
        return spec.stage(name)
    except KeyError:
        raise UsageError(f"no stage named {name!r} in {spec.name} (stages: "
                         f"{', '.join(s.name for s in spec.stages)})") from None


def _mask(text: str, secrets: Iterable[str]) -> str:
    """Secret values in job output become asterisks of the same byte length, so stored
    offsets still match the host's log."""
    for value in secrets:
        if len(value) >= 4 and value in text:
            text = text.replace(value, "*" * len(value.encode()))
    return text


def _utf8_boundary(data: bytes) -> int:
    """The length of the longest prefix of ``data`` that ends on a character boundary."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return len(data)
        if b >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


# -- outside the loop: cancel, status --------------------------------------------------------

def cancel_run(store: Store, run_id: int, *, actor: str = "human") -> RunState:
    """Kill a run's process group on its host and record it cancelled. A finished run
    that left a server running (a serve stage, maybe with ``keep: true``) has that server
    stopped instead."""
    sid, run = store.run(run_id)
    if run.state in RUN_FINAL:
        record = service_of(run)
        if record is not None and run.job and not service_stopped(run):
            stop_service(store, sid, run, record, actor=actor)
            _sid, run = store.run(run_id)
        return run
    if run.job:
        host = HostSpec(**run.job["host"])
        with executor_for(host) as ex:
            handle = ex.attach(run.job["key"])
            if handle is not None:
                ex.cancel(handle)
    with store.write(sid, actor) as tx:
        tx.update_run(run_id, state="cancelled", ended_at=utcnow(),
                      reason=f"cancelled by {actor}")
        if run.todo_id is not None and run.todo_id in tx.state.todos:
            t = tx.todo(run.todo_id)
            if t.status == "in_progress":
                tx.update_todo(t.num, status="blocked",
                               blocked_reason=f"r{run_id} cancelled by {actor}")
        return tx.state.runs[run_id]


def duration(run: RunState) -> float | None:
    from datetime import datetime

    if not run.started_at:
        return None
    end = run.ended_at or utcnow()
    fmt = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (fmt(end) - fmt(run.started_at)).total_seconds()


def stage_status(store: Store, session_id: int, log_lines: int = 3) -> list[dict[str, Any]]:
    """Per stage-bound todo: its status, its last run and the last lines of that run's log."""
    todos = sorted((t for t in store.todos(session_id) if t.stage),
                   key=lambda t: (t.position, t.num))
    runs = store.runs(session_id)
    out = []
    for t in todos:
        mine = [r for r in runs if r.todo_id == t.num]
        last = mine[-1] if mine else None
        row: dict[str, Any] = {"stage": t.stage, "todo": t.id, "status": t.status,
                               "priority": t.priority, "blocked_reason": t.blocked_reason,
                               "runs": len(mine), "last_run": None, "log_tail": []}
        if last is not None:
            text, _ = store.log(last.id, 0)
            row["last_run"] = {"id": f"r{last.id}", "state": last.state, "host": last.host,
                               "attempt": last.attempt, "exit_code": last.exit_code,
                               "duration_s": duration(last), "started_at": last.started_at,
                               "ended_at": last.ended_at, "reason": last.reason}
            row["log_tail"] = text.splitlines()[-log_lines:] if log_lines else []
        out.append(row)
    return out


def start_stage(store: Store, session_name: str, spec_path: str, stage: str, *,
                wait: float = 20.0) -> RunState:
    """Start one stage in the background (``harness run SPEC --only STAGE``, detached from
    the caller) and return its run as soon as it is recorded. For agents: the call returns
    at once, the run goes on, and ``harness logs``/``run_logs`` follow it."""
    import subprocess
    import sys

    from pipeline.spec import load_spec

    spec = load_spec(spec_path)
    _stage(spec, stage)
    sess = store.session_by_name(session_name)
    before = max((r.id for r in store.runs()), default=0)
    log_dir = data_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"run-stage-{os.getpid()}-{int(time.time() * 1000)}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "--db", store.url, "--session", session_name,
             "run", str(Path(spec_path).resolve()), "--only", stage, "--quiet"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        runs = [r for r in store.runs(sess.id if sess else None)
                if r.id > before and r.stage == stage]
        if runs:
            return runs[0]
        if proc.poll() is not None:
            said = " ".join(log_path.read_text(errors="replace").split())[-400:]
            raise HarnessError(f"stage {stage} did not start: {said or 'no output'}",
                               where=spec_path)
        time.sleep(0.1)
    raise HarnessError(f"stage {stage} was not recorded within {wait:g}s (the runner is "
                       f"still going; its output: {log_path})", where=spec_path)
