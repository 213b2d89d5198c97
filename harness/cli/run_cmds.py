"""`harness check|run|status|logs|cancel`: pipelines that drive their todos."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import click

from harness.cli.common import common_options, emit_json, harness, json_option
from harness.errors import EXIT_ERROR, Interrupted, Terminated, UsageError
from harness.render import aligned, safe_line
from harness.runner import Runner, cancel_run, stage_status
from harness.runner.deadline import stage_timeout
from harness.runner.plan import plan_run
from harness.runner.scheduler import check_overrides, stage_host, stage_scope
from harness.runner.spec_sync import changed_stages, describe
from pipeline.eagle3.plan.campaign_plan import plan as campaign_plan
from pipeline.eagle3.plan.disk_estimate import estimates as disk_estimates
from pipeline.redact import redact_text
from pipeline.served_gates import offline_pair
from pipeline.spec.durations import format_duration, parse_duration
from pipeline.spec.load import load_spec
from pipeline.spec.models import Pipeline, parse_scale
from pipeline.spec.params import check_params
from state.fold import RUN_FINAL
from state.interrupts import TerminateRequested, stop_signals_raise
from state.store import Store

SPEC = click.Path(exists=True, dir_okay=False, path_type=Path)


def parse_run_id(text: str) -> int:
    t = text.strip().lower()
    t = t[1:] if t.startswith("r") else t
    if not t.isdigit():
        raise UsageError(f"not a run id: {text!r} (expected something like r12)")
    return int(t)


@click.command()
@click.argument("spec_path", metavar="PIPELINE.yaml", type=SPEC)
@click.option("--json", "as_json", is_flag=True, help="Print the validated spec as JSON.")
def check(spec_path: Path, as_json: bool) -> None:
    """Validate a pipeline spec without running anything; say how much disk the offline
    hidden states of its data would take.

    For a spec with a `plan:` section, also print what each stage that runs the verifier
    needs with each backend on its GPUs (memory per GPU, shard disk, hours). Without a
    `verifier_config` there, the plan is of the verifier the spec builds: its training
    memory, the servers started together against the GPU (one warning line when they do
    not fit), and each stage's disk and estimated time."""
    spec = load_spec(spec_path)
    unchecked = check_params(spec, str(spec_path))
    disk = disk_estimates(spec)
    paper = campaign_plan(spec)
    if as_json:
        emit_json({**spec.model_dump(mode="json", by_alias=True),
                   "unchecked_actions": unchecked,
                   "offline_disk": [d.to_json() for d in disk],
                   "campaign_plan": paper.to_json() if paper else None})
        return
    click.echo(f"{spec_path}: pipeline {spec.name}, {len(spec.stages)} stage(s), "
               f"hosts {', '.join(sorted(spec.hosts))}: ok")
    if unchecked:
        click.echo(f"  parameters of {', '.join(unchecked)} not checked: their code does not "
                   "import here (install the eagle3 extra to check them)")
    rows = []
    for stage in spec.order():
        host = spec.host_for(stage)
        what = f"action {stage.action}" if stage.action else "run: " + safe_line(stage.run or "", 60)
        needs = f" after {', '.join(stage.needs)}" if stage.needs else ""
        rows.append([stage.name, f"on {host.label}", what + needs])
    for text in aligned(rows):
        click.echo(f"  {text}")
    for d in disk:
        click.echo(f"  disk: {d.line()}")
    for line in paper.lines() if paper else []:
        click.echo(f"  {line}")
    for stage in spec.stages:
        pair = offline_pair(spec.stages, stage)
        if pair.verify is not None:
            how = "without a gate key: it serves the checkpoint that stage verified, at " \
                "the same k" if pair.implied else "max_served_tau_gap"
            click.echo(f"  {stage.name}: served τ held to {pair.verify.name}'s within "
                       f"{pair.tolerance:.0%} ({how})")


@click.command("run")
@click.argument("spec_path", metavar="PIPELINE.yaml", type=SPEC)
@click.option("--only", metavar="STAGE", help="Run just this stage (its needs must be done).")
@click.option("--until", metavar="STAGE", help="Run this stage and what it needs.")
@click.option("--host-override", "overrides", multiple=True, metavar="STAGE=HOST",
              help="Run STAGE on HOST instead (repeatable).")
@click.option("--timeout", "timeouts", multiple=True, metavar="STAGE=DURATION",
              help="Give STAGE this time limit (90s, 15m, 2h; `none`: no limit) instead of "
                   "its spec's (repeatable).")
@click.option("--timeout-scale", type=float, metavar="X",
              help="Multiply every stage's spec timeout by X (e.g. 2 on a slow or busy "
                   "machine); replaces the spec's `defaults.timeout_scale`.")
@click.option("--retry-blocked", is_flag=True,
              help="Run the blocked stages in scope again (their todos go back to pending).")
@click.option("--rerun-changed", "changed", flag_value="rerun",
              help="Completed stages whose action or `with:` changed in the spec since they "
                   "ran run again, and the completed stages after them.")
@click.option("--keep-changed", "changed", flag_value="keep",
              help="Completed stages whose action or `with:` changed keep their results.")
@click.option("--dry-run", is_flag=True,
              help="Show what a run would do now (run, skip, re-attach, wait), change nothing.")
@click.option("--quiet", "-q", is_flag=True, help="Do not echo job logs (they are stored).")
@common_options
def run_cmd(spec_path: Path, only: str | None, until: str | None, overrides: tuple[str, ...],
            timeouts: tuple[str, ...], timeout_scale: float | None, retry_blocked: bool,
            changed: str | None, dry_run: bool, quiet: bool) -> None:
    """Run a pipeline: one todo per stage, each run as a detached job that survives
    disconnects, its log streamed into the store, completed only when its checks and gate
    pass (else blocked with the measured reason).

    Re-running resumes: finished stages are skipped, jobs left running are re-attached,
    blocked stages are left alone unless --retry-blocked. The spec is the plan: a stage
    waits on the stages its `needs` names now, and a completed stage whose action or
    `with:` changed since it ran is refused unless --rerun-changed or --keep-changed says
    what to do with it. Each stage's time limit counts
    from its job's start; a stage whose progress line (`eta Ns`) says it will not finish
    in time gets a warning with the command that gives it more. A server a stage started
    is stopped once no stage still to run needs it. Ctrl-C (exit 130), SIGTERM
    (143) or SIGHUP (129) stops watching: jobs keep running on their hosts, servers that
    stages started are stopped.
    """
    spec = load_spec(spec_path)
    check_params(spec, str(spec_path))
    host_overrides = dict(_pairs("--host-override", overrides, "STAGE=HOST"))
    limits = {stage: _limit(stage, text)
              for stage, text in _pairs("--timeout", timeouts, "STAGE=DURATION")}
    if timeout_scale is not None:
        try:
            parse_scale(timeout_scale)
        except ValueError as exc:
            raise UsageError(f"--timeout-scale: {exc}") from None
    h = harness()
    rerun = _rerun_command(spec_path, only, until)
    options = dict(only=only, until=until, host_overrides=host_overrides, timeouts=limits,
                   timeout_scale=timeout_scale, retry_blocked=retry_blocked, rerun=rerun)
    if dry_run:
        check_overrides(spec, host_overrides, limits)
        scope = stage_scope(spec, only, until)
        if _store_exists(h.store_source.value):
            name = h.session_source.value
            row = h.store.session_by_name(name)
        else:
            name, row = "(none yet: a new store)", None
        _dry_run(spec, scope, h.store if row else None, row.id if row else None, name,
                 options)
        return
    sess = h.session(create=True)
    _warn_if_run_elsewhere(h.store, sess.name, sess.pipeline, h.session_source.how, spec)
    runner = Runner(h.store, sess.id, spec, out=_echo, show_logs=not quiet,
                    changed=changed, **options)  # type: ignore[arg-type]
    after = ("jobs keep running on their hosts (servers that stages started were stopped): "
             "run again to re-attach, or `harness cancel RUN` to stop one")
    try:
        with stop_signals_raise():
            report = runner.run()
    except TerminateRequested as exc:
        raise Terminated(f"terminated ({exc.name}): stopped watching; {after}",
                         signum=exc.signum) from None
    except KeyboardInterrupt:
        raise Interrupted(f"stopped watching; {after}") from None
    if not report.ok:
        raise click.exceptions.Exit(EXIT_ERROR)


def _warn_if_run_elsewhere(store: Store, name: str, pipeline: str | None, how: str,
                           spec: Pipeline) -> None:
    """A pipeline that ran in another session, started in one that never ran it: every
    stage runs again, as this session's todos, over the same workdir. Say so first (the
    README's tour leaves its own session current; the main job's todos are in default)."""
    if pipeline == spec.name:
        return
    others = [s.name for s in store.sessions() if s.pipeline == spec.name and s.name != name]
    if not others:
        return
    click.echo(f"warning: pipeline {spec.name} ran in session {', '.join(others)}, not in "
               f"{name!r} ({how}): every stage runs again here, over the same files; to "
               f"resume it there: --session {others[-1]}", err=True)


def _echo(line: str) -> None:
    try:
        click.echo(line)
    except OSError:
        pass  # the terminal or reader went away (SIGHUP, a closed pipe): the store has it all


def _pairs(flag: str, items: tuple[str, ...], shape: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{flag} {item!r}: expected {shape}")
        pairs.append((key, value))
    return pairs


def _limit(stage: str, text: str) -> float | None:
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"--timeout {stage}={text}: {exc}") from None


def _rerun_command(spec_path: Path, only: str | None, until: str | None) -> str:
    """``harness run SPEC`` as typed, with the options that choose the store, session and
    scope: what runs this same pipeline again."""
    meta = click.get_current_context().find_root().meta
    words = ["harness"]
    for key, flag in (("harness.db", "--db"), ("harness.session", "--session")):
        if meta.get(key):
            words += [flag, str(meta[key])]
    words += ["run", str(spec_path)]
    if only:
        words += ["--only", only]
    if until:
        words += ["--until", until]
    return shlex.join(words)


def _store_exists(value: str) -> bool:
    """A URL names a server's database; a path must be a file already (a dry run never
    creates a store)."""
    return "://" in value or Path(value).expanduser().is_file()


def _dry_run(spec: Pipeline, scope: list[str], store: Store | None, sid: int | None,
             session_name: str, options: dict[str, Any]) -> None:
    """What a real run would do now, from the session's todos; nothing is written."""
    rows = plan_run(store, sid, spec, scope, retry_blocked=options["retry_blocked"])
    will = [r for r in rows if r.verdict in ("run", "re-attach")]
    click.echo(f"pipeline {spec.name}, session {session_name}: would run {len(will)} of "
               f"{len(rows)} stage(s) in scope, in this order (nothing changed):")
    width = max(len(r.stage) for r in rows)
    for r in rows:
        stage = spec.stage(r.stage)
        host = stage_host(spec, stage, options["host_overrides"])
        limit = stage_timeout(spec, stage, options["timeouts"], options["timeout_scale"])
        head = f"  {r.verdict:<9} {r.stage:<{width}} {r.todo or 'new':<4}"
        if r.verdict in ("run", "re-attach"):
            argv = stage.command(host, result_path="<run dir>/result.json")
            when = f", timeout {format_duration(limit)}" if limit else ""
            click.echo(f"{head} on {host.label}{when} ({safe_line(r.why, 80)})")
            click.echo(f"      {redact_text(' '.join(argv), {})}")
        else:
            click.echo(f"{head} {safe_line(r.why, 200)}")
    if any(r.verdict == "blocked" for r in rows):
        click.echo(f"blocked stages are not run: `{options['rerun']} --retry-blocked` "
                   "runs them")
    changes = changed_stages(store, sid, spec, scope) if store is not None and sid else []
    if changes:
        click.echo(f"the spec changed completed stages since they ran: {describe(changes)}; "
                   f"a run refuses them unless `{options['rerun']} --rerun-changed` (run "
                   "them and the stages after them again) or `--keep-changed`")


@click.command()
@click.option("--lines", "-n", type=int, default=3, show_default=True,
              help="Log lines to show per stage.")
@common_options
@json_option
def status(lines: int, as_json: bool) -> None:
    """Per stage: the todo's status, its last run (host, duration, exit code) and the last
    lines of that run's log."""
    h = harness()
    sess = h.session()
    rows = stage_status(h.store, sess.id, lines)
    if as_json:
        emit_json({"session": sess.name, "pipeline": sess.pipeline, "stages": rows})
        return
    if not rows:
        click.echo(f"session {sess.name}: no pipeline stages yet (`harness run PIPELINE.yaml`)")
        return
    click.echo(f"session {sess.name}, pipeline {sess.pipeline or '— (no pipeline has run in it)'}")
    cells = []
    for r in rows:
        run = r["last_run"]
        last = ""
        if run:
            dur = f"{run['duration_s']:.0f}s" if run["duration_s"] is not None else "-"
            code = "" if run["exit_code"] is None else f" exit {run['exit_code']}"
            last = f"{run['id']} {run['state']} on {run['host']} {dur}{code}"
        cells.append([r["todo"], r["stage"], r["status"], last])
    for r, line in zip(rows, aligned(cells, sep=" "), strict=True):
        click.echo(f"  {line}")
        if r["status"] == "blocked" and r["blocked_reason"]:
            click.echo(f"       blocked: {safe_line(r['blocked_reason'], 160)}")
        for log_line in r["log_tail"]:
            click.echo(f"       | {safe_line(log_line, 160)}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run ends.")
@click.option("--offset", type=int, default=0, help="Start at this byte of the log.")
@common_options
def logs(run_id: str, follow: bool, offset: int) -> None:
    """Print a run's log, as stored (RUN is like r12)."""
    h = harness()
    rid = parse_run_id(run_id)
    while True:
        text, offset = h.store.log(rid, offset)
        if text:
            click.echo(text, nl=False)
        _sid, run = h.store.run(rid)
        if not follow or run.state in RUN_FINAL:
            if follow:
                text, offset = h.store.log(rid, offset)
                if text:
                    click.echo(text, nl=False)
            break
        time.sleep(0.5)


def cancel_run_cmd(run_id: str) -> None:
    """`harness cancel rN`: stop a run on its host (see todo_cmds' `cancel`)."""
    h = harness()
    run = cancel_run(h.store, parse_run_id(run_id))
    stopped = ((run.job or {}).get("service") or {})
    extra = f"; its server {stopped.get('how')}" if stopped.get("state") == "stopped" else ""
    click.echo(f"r{run.id} {run.state}{extra}")


def register(cli: click.Group) -> None:
    cli.add_command(check)
    cli.add_command(run_cmd)
    cli.add_command(status)
    cli.add_command(logs)
