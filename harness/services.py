"""Servers that stages leave running, found in the store and stopped on their hosts.

A stage whose result has ``metrics.service`` (:class:`pipeline.vllm.service.ServiceRecord`; the
serve action writes one) left a server running. The run's stored result is the record, so
any later process (another ``harness run``, ``harness cancel RUN``) can find it. When the
harness stops it, it adds ``job.service = {"state": "stopped", "how": ..., "at": ...}`` to
the run, so it is never stopped twice and the serve stage knows its server is gone.

- :func:`live_services` lists the session's servers not yet stopped, and
  :func:`stopped_servers` the stages whose server was stopped (to start again when a
  later stage needs it);
- :func:`stop_service` kills one's process group on its host (TERM, then KILL after a
  grace period) through the executor and records it;
- :func:`stop_services` stops all of a session's live servers except those kept
  (``with: {keep: true}``), never raising: it runs while a pipeline run ends, maybe because
  of another error, which must not be hidden.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.errors import PipelineError
from pipeline.hosts.executor import Executor, executor_for
from pipeline.spec.models import HostSpec
from pipeline.vllm.service import ServiceRecord, stop_argv
from state.fold import RunState
from state.store import Store, utcnow

__all__ = ["live_services", "service_of", "service_stopped", "stop_service", "stop_services",
           "stopped_servers"]

GetExecutor = Callable[[HostSpec], Executor]


def service_of(run: RunState) -> ServiceRecord | None:
    """The server this run's result says it left running, if any."""
    metrics = (run.result or {}).get("metrics") or {}
    service = metrics.get("service")
    return ServiceRecord.from_json(service) if isinstance(service, dict) else None


def service_stopped(run: RunState) -> bool:
    return bool(((run.job or {}).get("service") or {}).get("state") == "stopped")


def stopped_servers(runs: list[RunState]) -> dict[str, RunState]:
    """Per stage, its latest successful run when that run's server has since been
    stopped: a stage to run again before a stage that needs its server."""
    latest: dict[str, RunState] = {}
    for r in runs:
        if r.state == "succeeded" and r.stage:
            latest[r.stage] = r
    return {stage: r for stage, r in latest.items()
            if service_of(r) is not None and service_stopped(r)}


def live_services(store: Store, session_id: int) -> list[tuple[RunState, ServiceRecord]]:
    """The session's servers that the harness has not stopped (they may have died alone)."""
    out = []
    for run in store.runs(session_id):
        record = service_of(run)
        if record is not None and run.state == "succeeded" and not service_stopped(run) \
                and run.job and run.job.get("host"):
            out.append((run, record))
    return out


def stop_service(store: Store, session_id: int, run: RunState, record: ServiceRecord, *,
                 executor: GetExecutor | None = None, actor: str = "runner",
                 grace: float = 10.0) -> str:
    """Stop ``record``'s process group on the run's host; record and return the outcome
    (terminated, killed, gone, not-ours). Raises PipelineError when the host cannot be
    reached or the group survives KILL; then nothing is recorded, so a later call retries."""
    host = HostSpec(**(run.job or {})["host"])
    if executor is not None:
        result = executor(host).run(stop_argv(record, grace), cwd="/",
                                    timeout=grace + 60)
    else:
        with executor_for(host) as ex:
            result = ex.run(stop_argv(record, grace), cwd="/", timeout=grace + 60)
    how = (result.stdout.split() or ["?"])[-1]
    if how == "stuck":
        raise PipelineError(f"process group {record.pgid} survived SIGKILL",
                            where=host.name, hint="the host may need a look (D-state?)")
    with store.write(session_id, actor) as tx:
        current = tx.load_runs()[run.id]
        job: dict[str, Any] = dict(current.job or {})
        job["service"] = {"state": "stopped", "how": how, "at": utcnow(), "by": actor}
        tx.update_run(run.id, job=job)
    return how


def stop_services(store: Store, session_id: int, *, executor: GetExecutor | None = None,
                  stages: set[str] | None = None, include_kept: bool = False,
                  actor: str = "runner", out: Callable[[str], None] = print) -> list[str]:
    """Stop the session's live servers (of ``stages``, if given); report each on ``out``."""
    lines = []
    for run, record in live_services(store, session_id):
        if (record.keep and not include_kept) or (stages is not None and run.stage not in
                                                   stages):
            continue
        label = f"r{run.id} ({run.stage}) server {record.url}, pgid {record.pgid} on {run.host}"
        try:
            how = stop_service(store, session_id, run, record, executor=executor, actor=actor)
            line = f"{label}: {how}"
        except PipelineError as exc:
            line = f"{label}: NOT stopped: {exc}"
        except Exception as exc:  # teardown must report, never mask the run's own outcome
            line = f"{label}: NOT stopped: {type(exc).__name__}: {exc}"
        lines.append(line)
        out(f"[services] {line}")
    return lines
