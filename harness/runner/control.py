"""What works on runs outside a running loop: cancel one, show where each stage stands,
start one stage in the background."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.paths import data_dir
from harness.runner.deadline import duration
from harness.runner.scheduler import stage_named
from harness.services import service_of, service_stopped, stop_service
from pipeline.hosts.executor import executor_for
from pipeline.spec.models import HostSpec
from state.fold import RUN_FINAL, RunState
from state.store import Store, utcnow


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
    if not run.job:
        return _record_cancel(store, sid, run_id, actor)
    host = HostSpec(**run.job["host"])
    with executor_for(host) as ex:
        handle = ex.attach(run.job["key"])  # the host answers before anything is recorded
        # On record before the job dies: the runner watching it then reads the end as this
        # cancel, not as a job that died of a signal, and keeps our reason.
        cancelled = _record_cancel(store, sid, run_id, actor)
        if handle is not None:
            ex.cancel(handle)
    return cancelled


def _record_cancel(store: Store, sid: int, run_id: int, actor: str) -> RunState:
    with store.write(sid, actor) as tx:
        current = tx.load_runs()[run_id]
        if current.state in RUN_FINAL:
            return current  # it ended on its own meanwhile: nothing left to cancel
        tx.update_run(run_id, state="cancelled", ended_at=utcnow(),
                      reason=f"cancelled by {actor}")
        if current.todo_id is not None and current.todo_id in tx.state.todos:
            t = tx.todo(current.todo_id)
            if t.status == "in_progress":
                tx.update_todo(t.num, status="blocked",
                               blocked_reason=f"r{run_id} cancelled by {actor}")
        return tx.state.runs[run_id]


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

    from pipeline.spec.load import load_spec

    spec = load_spec(spec_path)
    stage_named(spec, stage)
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
