"""Supervision of one job: start it (or find it again), watch it, record how it ended.

A job is started detached on its host through the host's executor, after the harness's
own ``pipeline`` package has been shipped there if the stage needs it. While it runs, its
log streams into the store and a person's cancel (of the todo or the run) or the stage's
timeout stops it. When it ends, :mod:`.evidence` judges it and the run and todo record
the verdict. A job a dead runner left is re-attached from the files on its host, never
launched twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.render import safe_line
from harness.runner import threads
from harness.runner.deadline import EtaWatch, duration, stage_scale, stage_timeout
from harness.runner.evidence import Judgement, checks_failed_alone, judge, record_verification
from harness.runner.logs import LOG_FLUSH_BYTES, LOG_FLUSH_SECONDS, Chunk, LogReader
from harness.runner.offline import offline_context, with_gap
from harness.runner.ownership import RUNNER, job_key
from harness.runner.pending import await_servers
from harness.runner.series import SeriesReader, unfinished_line
from pipeline.actions import StageResult
from pipeline.errors import ExecutorError, HostUnreachable, JobError, PipelineError
from pipeline.gates import Gate
from pipeline.hosts.executor import Executor, JobHandle, JobStatus, executor_for
from pipeline.hosts.ship import code_env, ensure_shipped, package_hash
from pipeline.series import MAX_LINE, is_series
from pipeline.spec.models import HostSpec, Pipeline, Stage
from state import retry
from state.errors import StoreUnreachable
from state.fold import RunState
from state.retry import retried
from state.series import SeriesPoint
from state.store import Store, utcnow

# a live log line longer than this is cut on the terminal; the store keeps it whole
LIVE_WIDTH = 300
# How long a flush of a running job's log, or a look for a person's cancel, waits for an
# unreachable store before the watch goes on (the job runs on meanwhile; asked again later).
LOG_WAIT_S = 2.0


@dataclass
class Outcome:
    stage: str
    todo: int
    run: int
    state: str
    completed: bool
    reason: str | None = None
    gated: bool = False  # a gate held it (its own, or one the runner implied)


class Supervisor:
    """Runs and watches the jobs of one pipeline run, one at a time, for its runner. It
    keeps one executor per host and remembers what code each host has been shipped."""

    def __init__(self, store: Store, session_id: int, spec: Pipeline, *,
                 out: Callable[[str], None], show_logs: bool, poll_interval: float,
                 secrets: Iterable[str],
                 timeouts: Mapping[str, float | None] | None = None,
                 timeout_scale: float | None = None,
                 rerun: str = "harness run PIPELINE.yaml"):
        self.store = store
        self.sid = session_id
        self.spec = spec
        #: ``--timeout STAGE=...`` (None: no limit) and ``--timeout-scale``
        self.timeouts = dict(timeouts or {})
        self.timeout_scale = timeout_scale
        #: the command that runs this pipeline again, for the advice in messages
        self.rerun = rerun
        self.out = out
        self.show_logs = show_logs
        self.poll_interval = poll_interval
        self.secrets = list(secrets)
        self._executors: dict[str, Executor] = {}
        self._shipped: dict[str, str] = {}

    def executor(self, host: HostSpec) -> Executor:
        if host.name not in self._executors:
            # What an executor learns about its host (no SFTP, say) is said once, here.
            self._executors[host.name] = executor_for(
                host, self.spec.hosts, notify=lambda m, name=host.name: self.out(f"[{name}] {m}"))
        return self._executors[host.name]

    def close(self) -> None:
        for ex in self._executors.values():
            ex.close()
        self._executors.clear()

    # -- starting ------------------------------------------------------------------------
    def attempt(self, stage: Stage, host: HostSpec, todo: int, run: RunState) -> Outcome:
        """Start the run's job on ``host`` and watch it to its end."""
        with threads.claim(stage, host) as share:  # held while the job runs
            return self._attempt(stage, host, todo, run, share)

    def _attempt(self, stage: Stage, host: HostSpec, todo: int, run: RunState,
                 share: threads.Share) -> Outcome:
        key = run.job["key"] if run.job else job_key(self.store, run.id)
        # servers that serve stages upstream started without waiting must answer first
        why = await_servers(self.store, self.sid, self.spec, stage, executor=self.executor,
                            code=self._code, out=self.out)
        if why:
            return self.end(stage, todo, run.id, "failed", None,
                            f"needs a server that did not start: {why}")
        try:
            ex = self.executor(host)
            # HARNESS_PYTHON: the host's interpreter (the one built-in actions use), so a
            # `run:` stage can reach the same packages without knowing where they live.
            env = stage.env_for(host, {"HARNESS_RUN_ID": f"r{run.id}",
                                       "HARNESS_STAGE": stage.name,
                                       "HARNESS_PYTHON": host.python, **share.env})
            code_hash = None
            if stage.is_builtin:
                code_hash, env = self._code(ex, host, env)
            result_path = f"{ex.run_dir(key)}/result.json"
            argv = stage.command(host, result_path=result_path)
            handle = ex.start_detached(key, argv, env=env)
        except PipelineError as exc:
            return self.end(stage, todo, run.id, "failed", None,
                            f"could not start on {host.label}: {exc}")
        how = "re-attached to" if handle.attached else "started"
        cpu = f"; {share.line()}" if share.line() else ""
        self.out(f"[{stage.name}] t{todo} {how} r{run.id} on {host.label} "
                 f"(attempt {run.attempt}, {handle.ident}{cpu})")
        self._running(run, handle, code_hash)
        return self.watch(stage, todo, run.id, ex, handle)

    @retried
    def _running(self, run: RunState, handle: JobHandle, code_hash: str | None) -> None:
        with self.store.write(self.sid, RUNNER) as tx:
            # A scheduler's job id goes on the run in the same write that says it runs.
            job = {**run.job, "job_id": handle.job_id} if run.job and handle.job_id \
                else run.job
            tx.update_run(run.id, state="running", pid=handle.pid, run_dir=handle.run_dir,
                          command=handle.command, code_hash=code_hash, job=job,
                          started_at=run.started_at or utcnow())

    def _code(self, ex: Executor, host: HostSpec, env: dict[str, str]
              ) -> tuple[str, dict[str, str]]:
        """Built-in actions run the harness's own ``pipeline`` package: shipped to SSH hosts
        and clusters (only when the host lacks this content hash; a queued batch job must
        not pick up edits made after it was submitted); used in place locally."""
        if not host.is_ssh and not host.scheduler:
            digest = self._shipped.get(host.name) or package_hash()
            self._shipped[host.name] = digest
            root = str(Path(__file__).resolve().parents[2])
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

    # -- watching ------------------------------------------------------------------------
    def watch(self, stage: Stage, todo: int, run_id: int, ex: Executor,
              handle: JobHandle) -> Outcome:
        timeout = stage_timeout(self.spec, stage, self.timeouts, self.timeout_scale)
        offset = self._stored_log_end(run_id)
        log = LogReader(ex, handle, offset, self.secrets)
        stream = _Stream(self, stage, run_id,
                         SeriesReader(run_id, offset, self._unfinished_line(run_id, offset)))
        eta = EtaWatch(stage.name, timeout, self.rerun,
                       stage_scale(self.spec, stage, self.timeouts, self.timeout_scale))
        last_flush = time.monotonic()
        started = last_flush - self._elapsed(run_id)  # a re-attached job keeps its clock
        status: JobStatus
        while True:
            status = ex.poll(handle)
            chunk = log.read()
            if chunk is not None:
                stream.take(chunk)
                warning = eta.see(chunk[1], time.monotonic() - started)
                if warning:
                    self._warn(stage, todo, warning)
            due = time.monotonic() - last_flush >= LOG_FLUSH_SECONDS
            if stream.pending and (due or status.finished
                                   or stream.pending > LOG_FLUSH_BYTES):
                stream.flush(wait=status.finished)
                last_flush = time.monotonic()
            if status.finished:
                break
            if self._stopped_by_person(run_id, todo):
                ex.cancel(handle)
                continue
            if timeout is not None and time.monotonic() - started > timeout:
                ex.cancel(handle)
                stream.drain(log)
                result = self._result(ex, handle) if stage.is_builtin else None
                return self.end(stage, todo, run_id, "failed", None,
                                f"timed out after {timeout:g}s; the job was cancelled"
                                + _partial(result) + eta.timed_out(timeout), result)
            time.sleep(self.poll_interval)
        stream.drain(log)
        return self._conclude(stage, todo, run_id, ex, handle, status)

    def _elapsed(self, run_id: int) -> float:
        """Seconds since the run started (0 for one starting now)."""
        _sid, run = self.store.run(run_id)
        return max(0.0, duration(run) or 0.0)

    def _warn(self, stage: Stage, todo: int, warning: str) -> None:
        """Said on the terminal and kept on the todo, where the board and `show` find it."""
        self.out(f"[{stage.name}] warning: {warning}")
        self._note(todo, f"warning: {warning}")

    @retried
    def _note(self, todo: int, text: str) -> None:
        with self.store.write(self.sid, RUNNER) as tx:
            tx.emit("todo.noted", todo_id=todo, payload={"text": text})

    def _show(self, stage: Stage, chunk: Chunk, run_id: int) -> None:
        if self.show_logs:
            for line in chunk[1].splitlines():
                if not is_series(line):  # a point is for the charts, not for reading
                    shown = safe_line(line, LIVE_WIDTH)
                    if len(shown) < len(safe_line(line)):  # a server's command, say
                        shown += f" (cut here; the whole line: harness logs r{run_id})"
                    self.out(f"  {stage.name} | {shown}")

    def _flush_log(self, run_id: int, chunks: Iterable[Chunk],
                   points: Sequence[SeriesPoint] = (), *, wait: bool = True) -> None:
        """Log text and the points read from it, in one write: a runner that re-attaches
        reads on from the stored log's end, so the two never disagree.

        ``wait=False``: try for a moment only (the job is watched meanwhile); the caller
        keeps what did not go and sends it with the next flush."""
        chunks = list(chunks)
        if not chunks and not points:
            return

        def write() -> None:
            with self.store.write(self.sid, RUNNER) as tx:
                for start, text in chunks:
                    tx.append_log(run_id, start, text)
                if points:
                    tx.append_points(points)
        retry.run(write, what="the job's log", cap_s=None if wait else LOG_WAIT_S)

    def _stored_log_end(self, run_id: int) -> int:
        return self.store.log_end(run_id)

    def _unfinished_line(self, run_id: int, end: int) -> str:
        """The line the job was writing when the stored log ends (a point whose line a
        dead runner had read only half of is read whole when re-attaching)."""
        if not end:
            return ""
        text, _ = self.store.log(run_id, max(0, end - 2 * MAX_LINE))
        return unfinished_line(text)

    def _stopped_by_person(self, run_id: int, todo: int) -> bool:
        """A person cancelled the todo (or the run, from another terminal). A store away
        for now cannot say: asked again at the next poll."""
        try:
            return retry.run(lambda: self._cancelled(run_id, todo), cap_s=LOG_WAIT_S)
        except StoreUnreachable:
            return False

    def _cancelled(self, run_id: int, todo: int) -> bool:
        try:
            t = self.store.todo(self.sid, todo)
        except HarnessError:
            return False
        if t.status == "cancelled":
            return True
        _sid, run = self.store.run(run_id)
        return run.state == "cancelled"

    # -- how it ended --------------------------------------------------------------------
    def _conclude(self, stage: Stage, todo: int, run_id: int, ex: Executor,
                  handle: JobHandle, status: JobStatus) -> Outcome:
        if status.state == "lost":
            return self.end(stage, todo, run_id, "lost", None, status.reason or
                            "job lost: its process vanished without an exit code "
                            "(host rebooted, or the process was killed)")
        result = self._result(ex, handle) if stage.is_builtin else None
        if status.state == "cancelled":
            return self.end(stage, todo, run_id, "cancelled", status.exit_code,
                            (status.reason or f"run r{run_id} was cancelled")
                            + _partial(result), result)
        if status.reason or ((status.state == "failed" or status.exit_code != 0)
                             and not checks_failed_alone(result)):
            last = self._last_error_line(run_id)
            # A scheduler's own reason (time limit, out of memory) leads: it is the cause.
            why = status.reason or f"exit code {status.exit_code}"
            if result is not None and result.error:
                why += f": {result.error}"
            elif last:
                why += f": {last}"
            return self.end(stage, todo, run_id, "failed", status.exit_code, why, result)
        gate = stage.gate
        if result is not None:
            # a served benchmark is held to the offline τ of its drafter too
            gate, offline = offline_context(self.store, self.sid, self.spec, stage)
            result.metrics = with_gap({**result.metrics, **offline})
        verdict = judge(stage, result, self._missing_outputs(ex, stage), gate=gate)
        self._record(stage, todo, run_id, result, verdict, gate)
        if verdict.problems:
            return self.end(stage, todo, run_id, "failed", status.exit_code,
                            "; ".join(verdict.problems), result)
        return self.end(stage, todo, run_id, "succeeded", 0, verdict.note, result,
                        gated=bool(gate))

    @retried
    def _record(self, stage: Stage, todo: int, run_id: int, result: StageResult | None,
                verdict: Judgement, gate: Gate | None) -> None:
        with self.store.write(self.sid, RUNNER) as tx:
            record_verification(tx, stage, todo, run_id, result, verdict, gate=gate)

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

    @retried
    def end(self, stage: Stage, todo: int, run_id: int, state: str, exit_code: int | None,
            reason: str | None, result: StageResult | None = None, *,
            gated: bool = False) -> Outcome:
        """Record how the run ended (a cancel recorded meanwhile by someone else wins)."""
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
                       completed=completed, reason=reason, gated=gated and completed)

    @retried
    def finish_todo(self, todo: int, outcome: Outcome) -> None:
        """The todo follows its run's outcome, unless a person decided meanwhile."""
        with self.store.write(self.sid, RUNNER) as tx:
            t = tx.todo(todo)
            if t.status != "in_progress":
                return  # a person decided meanwhile (done, cancelled, blocked): theirs stands
            if outcome.completed:
                tx.update_todo(todo, status="completed")
                if outcome.gated and outcome.reason:
                    # The numbers that let it through stay on the todo itself.
                    tx.emit("todo.noted", todo_id=todo,
                            payload={"text": f"r{outcome.run} {outcome.reason}"})
            else:
                tx.update_todo(todo, status="blocked",
                               blocked_reason=f"r{outcome.run} {outcome.state}: "
                                              f"{outcome.reason or 'no reason recorded'}")

    # -- a job a dead runner left --------------------------------------------------------
    def follow(self, run: RunState, restart_host: Callable[[Stage], HostSpec]) -> Outcome:
        """Re-attach to a run a dead runner left, or settle how it ended. A run that was
        queued but never started starts now, on ``restart_host(stage)``."""
        stage = self.spec.stage(run.stage) if run.stage in {s.name for s in self.spec.stages} \
            else None
        host = HostSpec(**run.job["host"]) if run.job else None
        if host is not None and host.name in self.spec.hosts:
            # The record keeps no env (it may hold secrets); the spec's entry has it, and a
            # login node may need it (PATH to squeue, SLURM_CONF).
            host = host.model_copy(update={"env": self.spec.hosts[host.name].env})
        if stage is None or host is None or run.todo_id is None:
            return self._settle_unknown(run, host)
        key = run.job["key"] if run.job else job_key(self.store, run.id)
        try:
            ex = self.executor(host)
            handle = ex.attach(key)
        except HostUnreachable as exc:
            raise HarnessError(f"cannot reach {host.label} to re-attach run r{run.id} "
                               f"({stage.name}): {exc.message}") from None
        if handle is None:
            if run.state == "queued":
                self.out(f"[{stage.name}] r{run.id} was queued but never started: starting it")
                outcome = self.attempt(stage, restart_host(stage), run.todo_id, run)
            else:
                outcome = self.end(stage, run.todo_id, run.id, "lost", None,
                                   "job lost: its run directory is gone from the host")
        else:
            self.out(f"[{stage.name}] re-attached to r{run.id} ({handle.ident}), left by "
                     "a runner that stopped")
            outcome = self.watch(stage, run.todo_id, run.id, ex, handle)
        self.finish_todo(run.todo_id, outcome)
        return outcome

    def _settle_unknown(self, run: RunState, host: HostSpec | None) -> Outcome:
        """A run of a stage this spec does not have: find out how it ended, nothing more."""
        state, code, reason = "lost", None, "its stage is not in this pipeline, and its job " \
                                            "cannot be found"
        if host is not None and run.job:
            try:
                ex = self.executor(host)
                handle = ex.attach(run.job["key"])
                if handle is not None:
                    st = ex.poll(handle)
                    if not st.finished:
                        return Outcome(run.stage or "?", run.todo_id or 0, run.id, "running",
                                       False, "still running (stage not in this pipeline)")
                    state, code, reason = st.state, st.exit_code, None
            except PipelineError as exc:
                reason = f"cannot check: {exc}"
        retry.run(lambda: self._ended(run.id, state, code, reason), what="the run's end")
        return Outcome(run.stage or "?", run.todo_id or 0, run.id, state, False, reason)


    def _ended(self, run_id: int, state: str, code: int | None, reason: str | None) -> None:
        with self.store.write(self.sid, RUNNER) as tx:
            tx.update_run(run_id, state=state, exit_code=code, reason=reason, ended_at=utcnow())


class _Stream:
    """One job's log on its way into the store: its chunks, shown and buffered, and the
    points of its series read from them, written together."""

    def __init__(self, sup: Supervisor, stage: Stage, run_id: int, series: SeriesReader):
        self.sup, self.stage, self.run_id, self.series = sup, stage, run_id, series
        self.chunks: list[Chunk] = []
        self.points: list[SeriesPoint] = []
        self.pending = 0  # characters buffered
        self.away = False  # the last flush found the store unreachable

    def take(self, chunk: Chunk, *, final: bool = False) -> None:
        self.chunks.append(chunk)
        self.pending += len(chunk[1])
        self.points += self.series.feed(*chunk, final=final)
        self.sup._show(self.stage, chunk, self.run_id)
        for message in self.series.take_messages():
            self.sup.out(f"[{self.stage.name}] {message}")

    def flush(self, *, wait: bool = True) -> None:
        """Send what is buffered. ``wait=False`` (while the job runs): a store away for
        now keeps it buffered for the next flush, said once on the terminal."""
        try:
            self.sup._flush_log(self.run_id, self.chunks, self.points, wait=wait)
        except StoreUnreachable as exc:
            if wait:
                raise
            if not self.away:
                self.away = True
                self.sup.out(f"[{self.stage.name}] store unreachable, the log waits for it "
                             f"({exc.message.split(';')[0]})")
            return
        if self.away:
            self.away = False
            self.sup.out(f"[{self.stage.name}] store reachable again")
        self.chunks, self.points, self.pending = [], [], 0

    def drain(self, log: LogReader) -> None:
        """Whatever the job wrote after our last read, and what was held back."""
        self.flush()
        while True:
            before = log.offset
            chunk = log.read(final=True)
            if chunk is not None:
                self.take(chunk)
            if log.offset == before:
                break
        self.points += self.series.feed(log.offset, "", final=True)  # an unended last line
        self.flush()


def _partial(result: StageResult | None) -> str:
    """What an interrupted action still reported (e.g. a benchmark's partial figures)."""
    return f"; the action said: {result.error}" if result is not None and result.error \
        else ""
