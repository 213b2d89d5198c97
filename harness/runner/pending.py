"""Servers started without waiting: found upstream of a stage, and waited for before it.

A serve stage with ``wait: false`` starts its server and ends at once (its
``metrics.service`` says ``ready: false``), so the next serve stages start theirs while it
loads: several vLLM servers come up together on one machine instead of one after another.
Before a stage starts whose ``needs`` reach such a stage (directly or through others), the
runner waits for every such server not yet seen answering: on each server's host it runs
:mod:`pipeline.vllm.ready` (the harness's own shipped code), which polls them all, each up
to its serve stage's ``health_timeout`` from its start.

- A server that answers is recorded on its run (``job.service_ready``: when, the start's
  seconds and vLLM's phases, the model), and a note on its todo says how long it took; it
  is never waited for again.
- A server that died or never answered has been stopped by then; its run records
  ``job.service`` as stopped, its serve todo is blocked with the server's own reason, and
  the stage that needed it fails naming it. ``harness run --retry-blocked`` starts both
  again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from harness.render import safe_line
from harness.runner.ownership import RUNNER
from harness.services import service_of, service_stopped
from pipeline.errors import PipelineError
from pipeline.hosts.executor import Executor
from pipeline.spec.models import HostSpec, Pipeline, Stage
from pipeline.stage_graph import upstream
from pipeline.vllm.service import ServiceRecord
from state.fold import RunState
from state.retry import retried
from state.store import Store, utcnow

__all__ = ["await_servers", "pending_servers"]

Code = Callable[[Executor, HostSpec, dict[str, str]], tuple[str, dict[str, str]]]


def pending_servers(store: Store, sid: int, spec: Pipeline, stage: Stage
                    ) -> list[tuple[RunState, ServiceRecord]]:
    """The servers that ``stage``'s upstream serve stages started without waiting, still
    running as far as the store knows, and not yet seen answering."""
    names = {s.name for s in upstream(spec.stages, stage.name)}
    latest: dict[str, RunState] = {}
    for run in store.runs(sid):
        if run.stage in names and run.state == "succeeded":
            latest[run.stage] = run  # type: ignore[index]
    out = []
    for run in latest.values():
        record = service_of(run)
        if record is None or record.ready or service_stopped(run) or not run.job \
                or (run.job or {}).get("service_ready"):
            continue
        out.append((run, record))
    return out


def _host(spec: Pipeline, run: RunState) -> HostSpec:
    host = HostSpec(**(run.job or {})["host"])
    if host.name in spec.hosts:  # the record keeps no env; the spec's entry has it
        host = host.model_copy(update={"env": spec.hosts[host.name].env})
    return host


def _request(run: RunState, record: ServiceRecord) -> dict[str, Any]:
    timeout = record.health_timeout or 900.0
    started = record.started_at or 0.0
    return {"name": run.stage, "url": record.url, "pid": record.pid, "pgid": record.pgid,
            "start_time": record.start_time, "log": record.log, "started_at": started,
            "deadline": started + timeout, "health_timeout": timeout,
            "stop_grace": record.stop_grace or 10.0}


def await_servers(store: Store, sid: int, spec: Pipeline, stage: Stage, *,
                  executor: Callable[[HostSpec], Executor], code: Code,
                  out: Callable[[str], None]) -> str | None:
    """Wait for ``stage``'s pending servers; None when every one answers, else why not
    (the failed servers are stopped and recorded, and their todos blocked)."""
    pending = pending_servers(store, sid, spec, stage)
    if not pending:
        return None
    by_host: dict[str, list[tuple[RunState, ServiceRecord]]] = {}
    for run, record in pending:
        by_host.setdefault((run.job or {})["host"]["name"], []).append((run, record))
    longest = max((r.started_at or 0) + (r.health_timeout or 900) for _run, r in pending)
    out(f"[{stage.name}] waiting for {len(pending)} server(s) started without waiting: "
        + ", ".join(f"{run.stage} (r{run.id}, {record.url})" for run, record in pending))
    failures: list[str] = []
    for runs in by_host.values():
        host = _host(spec, runs[0][0])
        requests = [_request(run, record) for run, record in runs]
        answers = _ask(host, requests, executor, code, longest)
        for run, _record in runs:
            answer = answers.get(run.stage or "", {"ready": False, "error": answers.get(
                "", {}).get("error", "the wait on its host gave no answer")})
            if answer.get("ready"):
                _record_ready(store, sid, run, answer, out)
            else:
                failures.append(_record_failed(store, sid, run, answer, out))
    if failures:
        return "; ".join(failures)
    return None


def _ask(host: HostSpec, requests: list[dict[str, Any]],
         executor: Callable[[HostSpec], Executor], code: Code,
         longest: float) -> dict[str, dict[str, Any]]:
    """Run the waiter on ``host``; its answers by stage name ("" holds a general error)."""
    try:
        ex = executor(host)
        _digest, env = code(ex, host, {})
        # the waiter ends by each server's own deadline; this only bounds a stuck transport
        limit = max(60.0, longest - time.time() + 120.0)
        result = ex.run([host.python, "-m", "pipeline.vllm.ready", json.dumps(requests)],
                        env=env, timeout=limit, warn=True)
    except PipelineError as exc:
        return {"": {"ready": False, "error": f"could not wait on {host.label}: {exc}"}}
    answers: dict[str, dict[str, Any]] = {}
    for line in result.stdout.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("name"), str):
            answers[doc["name"]] = doc
    if not answers and result.exit_code != 0:
        err = safe_line(result.stderr.strip() or result.stdout.strip() or
                        f"exit code {result.exit_code}", 300)
        answers[""] = {"ready": False, "error": f"the wait on {host.label} failed: {err}"}
    return answers


@retried
def _record_ready(store: Store, sid: int, run: RunState, answer: dict[str, Any],
                  out: Callable[[str], None]) -> None:
    startup = answer.get("startup_s")
    with store.write(sid, RUNNER) as tx:
        current = tx.load_runs()[run.id]
        job = dict(current.job or {})
        job["service_ready"] = {"at": utcnow(), "startup_s": startup,
                                "model": answer.get("model"),
                                "startup_phases": answer.get("startup_phases") or {},
                                "notes": answer.get("notes") or []}
        tx.update_run(run.id, job=job)
        took = f" after {startup:.1f}s" if isinstance(startup, (int, float)) else ""
        notes = "".join(f"; {n}" for n in answer.get("notes") or [])
        line = f"server {answer.get('model')} answering{took} (started without waiting)" \
            + notes
        if run.todo_id is not None:
            tx.emit("todo.noted", todo_id=run.todo_id, payload={"text": f"r{run.id} {line}"})
    out(f"[{run.stage}] r{run.id} {line}")


@retried
def _record_failed(store: Store, sid: int, run: RunState, answer: dict[str, Any],
                   out: Callable[[str], None]) -> str:
    error = str(answer.get("error") or "it did not answer")
    with store.write(sid, RUNNER) as tx:
        current = tx.load_runs()[run.id]
        job = dict(current.job or {})
        if answer.get("stopped"):
            job["service"] = {"state": "stopped", "how": answer["stopped"], "at": utcnow(),
                              "by": RUNNER}
        tx.update_run(run.id, job=job)
        if run.todo_id is not None and tx.todo(run.todo_id).status == "completed":
            tx.update_todo(run.todo_id, status="blocked",
                           blocked_reason=f"r{run.id} server failed to start: {error}")
    out(f"[{run.stage}] r{run.id} server failed to start: {safe_line(error, 300)}")
    return f"{run.stage}'s server (r{run.id}) did not start: {error}"
