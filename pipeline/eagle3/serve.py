"""Serve the verifier with vLLM, with the EAGLE-3 drafter or without it (the baseline).

Starts ``vllm serve TARGET --speculative-config '{"method":"eagle3","model":DRAFT,
"num_speculative_tokens":k,"draft_tensor_parallel_size":t}' ...`` in its own session, so
the server outlives this action; copies the server's log to stdout while it starts (the
harness streams stdout into the store); waits for ``/health`` and ``/v1/models``; and exits
0 leaving the server running, with ``metrics.service`` saying how to find and stop it
(:mod:`pipeline.vllm.service`). The harness stops it once no stage still to run needs it,
or when the pipeline run ends, unless the stage says ``keep: true``.

``num_speculative_tokens_per_batch_size`` (a list of ``[start, end, k]``, or the file a
benchmark sweep wrote) serves vLLM's dynamic speculation: it is checked by vLLM's rules
here (:mod:`pipeline.vllm.schedule`), put into ``--speculative-config``, and k defaults to
its largest entry. ``kv_cache_memory_bytes`` fixes the KV cache instead of letting vLLM
size it from the free memory it profiles. ``wait: false`` starts the server and ends
without waiting for it (``ready: false`` in its record), so several servers load at once;
the harness waits for it before the first stage that needs it (:mod:`pipeline.vllm.ready`).

It refuses to start on a port that something already listens on, since a health check
would then pass against the wrong server. When the server dies during start or never
becomes healthy, the action fails with the server's own error line (e.g. vLLM's eagle3
model-type refusal) and kills the server's whole process group first, so nothing is left
running. SIGTERM (a cancelled or timed-out stage) does the same.

A P-EAGLE drafter (an export whose config is speculators ``peagle``) is served with
``"parallel_drafting": true`` in that JSON, as vLLM 0.26.0 needs for it
(``--parallel-drafting``/``--no-parallel-drafting`` force the choice; a choice the drafter
was not trained for is refused before vLLM starts).

Run as ``python -m pipeline.eagle3.serve --target DIR [--draft DIR] [--port 8000] ...``;
``docs/serving.md`` lists every parameter.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.actions import StageResult, add_bool_arg, make_parser, run_action
from pipeline.errors import ActionError
from pipeline.served_gates import SERVE_K
from pipeline.vllm import schedule as sched
from pipeline.vllm.drafter import parallel_drafting
from pipeline.vllm.ready import LogPump, NotReady, log_notes, settle, wait_ready
from pipeline.vllm.server import (
    byte_size,
    capture_failure,
    command_arg,
    json_value,
    port_in_use,
    port_owner,
    serve_argv,
    startup_phases,
)
from pipeline.vllm.service import ServiceRecord, process_start_time, stop_group

ACTION = "eagle3.serve"


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Start vLLM on the verifier (with the EAGLE-3 drafter, or "
                            "without it as a baseline), wait until it answers, leave it "
                            "running.")
    p.add_argument("--target", required=True, help="verifier directory or model id")
    p.add_argument("--draft", help="drafter directory (the export stage's output)")
    add_bool_arg(p, "speculative", True, "serve with the drafter; --no-speculative serves "
                                         "the target alone (the baseline)")
    p.add_argument("--num-speculative-tokens", type=int, default=None,
                   help=f"k (default {SERVE_K}; with a schedule, its largest k)")
    p.add_argument("--num-speculative-tokens-per-batch-size", default=None,
                   help="vLLM's dynamic speculation schedule: a JSON list of [start, end, k] "
                        "(k=0: no speculation for those batch sizes), or the path of a "
                        "file holding one (a benchmark sweep's schedule_out)")
    p.add_argument("--fallback-k", type=int, default=None,
                   help="with a schedule: the fixed k to serve when the schedule's server "
                        "dies in its CUDA-graph capture (default: the best_fixed_k of the "
                        "sweep's file the schedule comes from)")
    p.add_argument("--draft-tensor-parallel-size", type=int, default=1)
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--kv-cache-memory-bytes", type=byte_size, default=None,
                   help="KV cache size (bytes, or 4G, 512M): vLLM then skips sizing it from "
                        "the free memory it profiles, so servers starting together on one "
                        "GPU do not count each other's allocations")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1",
                   help="address the server binds (0.0.0.0 to reach it from elsewhere)")
    p.add_argument("--served-model-name")
    p.add_argument("--reasoning-parser", help="e.g. qwen3, deepseek_r1")
    add_bool_arg(p, "trust-remote-code", False, "pass --trust-remote-code to vLLM")
    add_bool_arg(p, "parallel-drafting", None,
                 "serve the drafter with vLLM's parallel drafting (P-EAGLE); default: when "
                 "the draft is a speculators peagle export")
    p.add_argument("--method", default="eagle3", help="speculative method (eagle3)")
    p.add_argument("--speculative-config", type=json_value(dict), default=None,
                   help="extra keys for --speculative-config (JSON object)")
    p.add_argument("--extra-args", type=json_value(list), default=[],
                   help="more vllm serve arguments (JSON list)")
    p.add_argument("--command", type=command_arg, default=["vllm"],
                   help='the server executable: a path, or a JSON list such as '
                        '["python", "-m", "vllm.entrypoints.cli.main"]')
    p.add_argument("--env", type=json_value(dict), default={},
                   help="environment for the server only (JSON object)")
    p.add_argument("--health-timeout", type=float, default=900.0,
                   help="seconds to wait for /health and /v1/models")
    p.add_argument("--stop-grace", type=float, default=10.0,
                   help="seconds between TERM and KILL when stopping a failed server")
    p.add_argument("--log", type=Path, help="server log (default: server.log beside the "
                                            "result)")
    add_bool_arg(p, "keep", False, "leave the server running after the pipeline run ends")
    add_bool_arg(p, "wait", True, "wait until the server answers; --no-wait starts it and "
                                  "ends, so that several servers load at once: the first "
                                  "stage that needs it waits, up to health_timeout")
    return p


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _connect_host(bind: str) -> str:
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


def _hint(reason: str) -> str:
    if "only supported for" in reason:
        return ("this vLLM's eagle3 support refuses the verifier's model_type: run the "
                "preflight stage, and use a vLLM version that accepts it")
    if "does not support EAGLE3 interface" in reason:
        return ("this vLLM's model class for the verifier does not implement "
                "SupportsEagle3 (vLLM 0.21 and later have no model-type list; the class "
                "decides): run the preflight stage, and use a vLLM whose class for this "
                "architecture implements it")
    if "out of memory" in reason.lower():
        return "lower max_model_len or gpu_memory_utilization, or raise tensor_parallel_size"
    return "the server's whole log is in the file named above"


def _speculation(args: argparse.Namespace) -> tuple[int, sched.Schedule | None]:
    """k, and the schedule when one is given: read and checked here, so a schedule vLLM
    would refuse fails in a second, not after the engine's start."""
    if args.num_speculative_tokens_per_batch_size is None:
        return (SERVE_K if args.num_speculative_tokens is None
                else args.num_speculative_tokens), None
    if not args.speculative:
        raise ActionError("a speculation schedule needs `speculative: true` and a `draft`")
    try:
        schedule = sched.load(str(args.num_speculative_tokens_per_batch_size), Path.cwd())
    except sched.ScheduleError as exc:
        raise ActionError(str(exc), where="num_speculative_tokens_per_batch_size") from None
    need = sched.needed_k(schedule)
    k = need if args.num_speculative_tokens is None else args.num_speculative_tokens
    if k < need:
        raise ActionError(f"num_speculative_tokens {k} is below the schedule's largest k "
                          f"{need}: vLLM would cap every range at {k}",
                          hint="leave num_speculative_tokens out (it follows the schedule) "
                               f"or raise it to {need}")
    return k, schedule


@dataclass
class Launched:
    """A server that started (answering, or left to load when not waited for)."""

    argv: list[str]
    record: ServiceRecord
    pump: LogPump
    model: str | None
    startup: float


class Died(Exception):
    """The server died or never answered during start; it has been stopped."""

    def __init__(self, reason: str, lines: list[str], where: str):
        super().__init__(reason)
        self.reason, self.lines, self.where = reason, lines, where


def _launch(argv: list[str], args: argparse.Namespace, log_path: Path, url: str,
            wait: bool) -> Launched:
    """Start ``argv`` in its own session, its output appended to ``log_path``; wait until
    it answers (or, not waiting, that it does not die at once). :class:`Died` once a failed
    server's whole process group is stopped. SIGTERM stops a half-started one too."""
    print(f"starting: {shlex.join(argv)}", flush=True)
    print(f"server log: {log_path}", flush=True)
    # SIGTERM (a cancelled or timed-out stage) must not leave a half-started server: from
    # here on it raises, and whatever was started is stopped below.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    proc: subprocess.Popen[bytes] | None = None
    pump: LogPump | None = None
    leader_start: str | None = None
    ready = False
    started, started_at = time.monotonic(), time.time()
    model: str | None = None
    try:
        start_at = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log_fh:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fh,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        env={**os.environ, **{k: str(v) for k, v in
                                                              args.env.items()}})
            except OSError as exc:
                raise ActionError(f"cannot start {argv[0]}: {exc.strerror or exc}",
                                  hint="is vLLM installed in this host's environment? set "
                                       "the stage's `command` to its executable") from None
        # start_new_session: the server leads its own session and process group
        leader_start = process_start_time(proc.pid)
        record = ServiceRecord(url=url, pid=proc.pid, pgid=proc.pid, start_time=leader_start,
                               port=args.port, log=str(log_path), keep=bool(args.keep),
                               ready=wait, started_at=round(started_at, 3),
                               health_timeout=args.health_timeout,
                               stop_grace=args.stop_grace)
        pump = LogPump(log_path, start_at, echo=lambda line: print(line, flush=True))
        exited = lambda: None if proc.poll() is None else \
            f"exited with code {proc.returncode}"  # noqa: E731
        try:
            if wait:
                model = wait_ready(url, exited, pump, args.health_timeout)
            else:
                settle(exited, pump)
        except NotReady as exc:
            pump.pump(final=True)
            raise Died(str(exc), list(pump.lines), str(pump.path)) from None
        ready = True
    except KeyboardInterrupt:
        raise ActionError("interrupted while the server was starting; it was stopped") \
            from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc is not None and not ready:
            if pump is not None:
                pump.pump(final=True)
            how = stop_group(proc.pid, args.stop_grace, leader_start)
            proc.poll()
            print(f"server process group {proc.pid}: {how}", flush=True)
    pump.pump()
    return Launched(argv, record, pump, model, time.monotonic() - started)


def run(args: argparse.Namespace) -> StageResult:
    result = StageResult(action=ACTION)
    speculative = bool(args.speculative)
    if speculative and not args.draft:
        raise ActionError("speculative serving needs `draft` (the drafter directory)",
                          hint="for a baseline without speculation set `speculative: false`")
    k, schedule = _speculation(args)
    for host in dict.fromkeys([args.host or "0.0.0.0", "127.0.0.1"]):
        if port_in_use(args.port, host):
            owner = port_owner(args.port)
            raise ActionError(f"port {args.port} is already in use on {host}"
                              + (f" by {owner}" if owner else ""),
                              hint="choose another `port`, or stop that server (one the "
                                   "harness started stops with `harness cancel RUN`)")
    # a relative directory would read as a model id ("export/drafter") once it leaves here
    local = lambda p: str(Path(p).resolve()) if p and Path(p).is_dir() else p  # noqa: E731
    parallel = speculative and _parallel(args)
    if parallel:
        # measured: the runner, not the drafter, decides P-EAGLE's served speed in 0.26
        print("note: vLLM 0.26 serves parallel drafting on its V1 model runner (V2 does not "
              "support it yet), whose draft step costs more host time than V2's: compare "
              "with EAGLE-3 served on V1 too (VLLM_USE_V2_MODEL_RUNNER=0), as "
              "docs/PERFORMANCE.md does", flush=True)

    def argv_for(k: int, schedule: sched.Schedule | None) -> list[str]:
        extra = dict(args.speculative_config or {})
        if schedule is not None:
            extra[sched.KEY] = [list(e) for e in schedule]
        return serve_argv(
            args.command, local(args.target), port=args.port, host=args.host,
            draft=local(args.draft) if speculative else None, num_speculative_tokens=k,
            draft_tensor_parallel_size=args.draft_tensor_parallel_size,
            tensor_parallel_size=args.tensor_parallel_size, max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization,
            kv_cache_memory_bytes=args.kv_cache_memory_bytes,
            served_model_name=args.served_model_name,
            reasoning_parser=args.reasoning_parser,
            trust_remote_code=args.trust_remote_code, speculative_config=extra or None,
            method=args.method, extra_args=args.extra_args, parallel_drafting=parallel)

    log_path = (args.log or ((args.result.parent if args.result else Path.cwd())
                             / "server.log")).resolve()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://{_connect_host(args.host)}:{args.port}"
    wait, fallback = bool(args.wait), None
    if schedule is not None:
        fallback = args.fallback_k if args.fallback_k is not None else sched.fallback_k(
            str(args.num_speculative_tokens_per_batch_size), Path.cwd())
        problem = sched.capture_problem(schedule, k,
                                        sched.graphs_of(args.extra_args, args.env))
        if problem:
            print(f"note: {problem}; starting it all the same (a later vLLM may start it)",
                  flush=True)
        if not wait:
            print("note: a server with a speculation schedule is waited for (wait: false "
                  "does not apply): if it dies in its CUDA-graph capture, this stage starts "
                  + (f"the sweep's best fixed k={fallback} instead" if fallback else
                     "nothing else (no fallback_k)"), flush=True)
            wait = True
    try:
        launched = _launch(argv_for(k, schedule), args, log_path, url, wait)
    except Died as died:
        why = capture_failure(died.lines) if schedule is not None else None
        if why is None or not fallback:
            raise ActionError(died.reason, where=died.where, hint=_hint(died.reason)
                              if why is None else "the schedule died in CUDA-graph capture "
                              "and no fallback_k is known: give `fallback_k`, or serve a "
                              "schedule from a sweep's file (it records best_fixed_k)") \
                from None
        first = shlex.join(argv_for(k, schedule))
        print(f"FALLBACK: the schedule's server died in its CUDA-graph capture ({why}); "
              f"starting the sweep's best fixed k={fallback} instead", flush=True)
        result.metrics["fallback"] = {
            "k": fallback, "schedule": [list(e) for e in schedule],  # type: ignore[union-attr]
            "why": f"the schedule {json.dumps(schedule)} died in CUDA-graph capture: {why}; "
                   f"served the sweep's best fixed k={fallback} instead",
            "failed_command": first}
        k, schedule = fallback, None
        launched = _launch(argv_for(k, None), args, log_path, url, wait)
    return _served(result, args, launched, k, schedule, parallel, speculative, wait)


def _served(result: StageResult, args: argparse.Namespace, launched: Launched, k: int,
            schedule: sched.Schedule | None, parallel: bool, speculative: bool,
            wait: bool) -> StageResult:
    record, url = launched.record, launched.record.url
    lines = launched.pump.lines
    method = "P-EAGLE, parallel drafting" if parallel else "EAGLE-3"
    how = ("no speculation" if not speculative else
           f"{method}, schedule {json.dumps(schedule)} (k up to {k})" if schedule else
           f"{method}, k={k}")
    fallback = result.metrics.get("fallback")
    result.metrics.update({
        "service": record.to_json(), "url": url, "speculative": speculative,
        "num_speculative_tokens": k if speculative else 0,
        "parallel_drafting": parallel,
        "tensor_parallel_size": args.tensor_parallel_size,
        "command": shlex.join(launched.argv), "waited": wait,
    })
    if schedule is not None:
        result.metrics[sched.KEY] = [list(e) for e in schedule]
    life = "kept after the pipeline run (keep: true)" if args.keep else \
        "stopped once no stage still to run needs it, or when the pipeline run ends"
    lead = f"FALLBACK: {fallback['why']}; " if fallback else ""
    if not wait:
        result.check("server_started", True, value=record.pid,
                     message="running; not waited for")
        result.summary = (f"{lead}started at {url} ({how}), pid {record.pid}, not waited "
                          f"for: the first stage that needs it waits up to "
                          f"{args.health_timeout:g}s from its start for /health; {life}")
        return result
    notes = log_notes(lines)
    result.metrics.update({
        "model": launched.model, "startup_s": round(launched.startup, 3),
        # what vLLM's own log says the start cost (model load, torch.compile, CUDA graphs)
        "startup_phases": startup_phases(lines)})
    if notes:
        result.metrics["server_notes"] = notes
    result.check("server_healthy", True, value=round(launched.startup, 1), expected=f"< "
                 f"{args.health_timeout:g}s", message=f"{url}/health answered")
    result.check("model_listed", True, value=launched.model, message="/v1/models lists it")
    result.summary = (f"{lead}serving {launched.model} at {url} ({how}), pid {record.pid}, "
                      f"up in {launched.startup:.1f}s; {life}"
                      + "".join(f"; {n}" for n in notes))
    return result


def _parallel(args: argparse.Namespace) -> bool:
    """Parallel drafting for a P-EAGLE draft (a speculators peagle config), unless told;
    a choice the drafter does not fit is refused here rather than by vLLM mid-start."""
    draft = Path(args.draft)
    trained = parallel_drafting(str(draft)) if draft.is_dir() else None
    chosen = args.parallel_drafting
    if trained is None:  # a model id: vLLM reads it, we cannot
        return bool(chosen)
    if chosen is False and trained:
        raise ActionError("the drafter is a P-EAGLE drafter (speculators peagle): it drafts "
                          "from mask rows in one forward, and served without parallel "
                          "drafting it would be fed its own drafts instead",
                          where=str(draft / "config.json"),
                          hint="drop `parallel_drafting: false`")
    if chosen and not trained:
        raise ActionError("parallel drafting needs a P-EAGLE drafter (a speculators peagle "
                          "export with mask_token_id and mask_hidden); vLLM refuses this one "
                          "('mask_hidden not found in weights')",
                          where=str(draft / "config.json"),
                          hint="train it with `method: peagle`, or drop `parallel_drafting`")
    return trained


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
