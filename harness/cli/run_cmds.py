"""`harness check|run|status|logs|cancel`: pipelines that drive their todos."""

from __future__ import annotations

import time
from pathlib import Path

import click

from harness.cli.common import common_options, emit_json, harness, json_option
from harness.errors import EXIT_ERROR, Interrupted, Terminated, UsageError
from harness.render import safe_line
from harness.runner import Runner, cancel_run, stage_status
from pipeline.eagle3.disk_estimate import estimates as disk_estimates
from pipeline.params import check_params
from pipeline.redact import redact_text
from pipeline.spec import load_spec
from state.fold import RUN_FINAL
from state.interrupts import TerminateRequested, stop_signals_raise

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
    hidden states of its data would take."""
    spec = load_spec(spec_path)
    unchecked = check_params(spec, str(spec_path))
    disk = disk_estimates(spec)
    if as_json:
        emit_json({**spec.model_dump(mode="json", by_alias=True),
                   "unchecked_actions": unchecked,
                   "offline_disk": [d.to_json() for d in disk]})
        return
    click.echo(f"{spec_path}: pipeline {spec.name}, {len(spec.stages)} stage(s), "
               f"hosts {', '.join(sorted(spec.hosts))}: ok")
    if unchecked:
        click.echo(f"  parameters of {', '.join(unchecked)} not checked: their code does not "
                   "import here (install the eagle3 extra to check them)")
    for stage in spec.order():
        host = spec.host_for(stage)
        what = f"action {stage.action}" if stage.action else "run: " + safe_line(stage.run or "", 60)
        needs = f" after {', '.join(stage.needs)}" if stage.needs else ""
        click.echo(f"  {stage.name:<16} on {host.label:<20} {what}{needs}")
    for d in disk:
        click.echo(f"  disk: {d.line()}")


@click.command("run")
@click.argument("spec_path", metavar="PIPELINE.yaml", type=SPEC)
@click.option("--only", metavar="STAGE", help="Run just this stage (its needs must be done).")
@click.option("--until", metavar="STAGE", help="Run this stage and what it needs.")
@click.option("--host-override", "overrides", multiple=True, metavar="STAGE=HOST",
              help="Run STAGE on HOST instead (repeatable).")
@click.option("--dry-run", is_flag=True, help="Show what would run, change nothing.")
@click.option("--quiet", "-q", is_flag=True, help="Do not echo job logs (they are stored).")
@common_options
def run_cmd(spec_path: Path, only: str | None, until: str | None, overrides: tuple[str, ...],
            dry_run: bool, quiet: bool) -> None:
    """Run a pipeline: one todo per stage, each run as a detached job that survives
    disconnects, its log streamed into the store, completed only when its checks and gate
    pass (else blocked with the measured reason).

    Re-running resumes: finished stages are skipped, jobs left running are re-attached.
    Ctrl-C (exit 130), SIGTERM (143) or SIGHUP (129) stops watching: jobs keep running on
    their hosts, servers that stages started are stopped.
    """
    spec = load_spec(spec_path)
    check_params(spec, str(spec_path))
    host_overrides: dict[str, str] = {}
    for item in overrides:
        stage, sep, host = item.partition("=")
        if not sep or not stage or not host:
            raise UsageError(f"--host-override {item!r}: expected STAGE=HOST")
        host_overrides[stage] = host
    if dry_run:
        _dry_run(spec, only, until, host_overrides)
        return
    h = harness()
    sess = h.session(create=True)
    runner = Runner(h.store, sess.id, spec, only=only, until=until,
                    host_overrides=host_overrides, out=_echo, show_logs=not quiet)
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


def _echo(line: str) -> None:
    try:
        click.echo(line)
    except OSError:
        pass  # the terminal or reader went away (SIGHUP, a closed pipe): the store has it all


def _dry_run(spec, only, until, overrides) -> None:  # type: ignore[no-untyped-def]
    from harness.runner import Runner as _R

    probe = object.__new__(_R)
    probe.spec = spec
    probe.overrides = overrides
    scope = _R._scope(probe, only, until)
    click.echo(f"pipeline {spec.name}: would run {len(scope)} stage(s) in this order "
               "(nothing changed):")
    for name in scope:
        stage = spec.stage(name)
        host = spec.hosts[overrides[name]] if name in overrides else spec.host_for(stage)
        argv = stage.command(host, result_path="<run dir>/result.json")
        click.echo(f"  {name:<16} on {host.label}: {redact_text(' '.join(argv), {})}")


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
    click.echo(f"session {sess.name}, pipeline {sess.pipeline or '?'}")
    for r in rows:
        run = r["last_run"]
        line = f"  {r['todo']:<4} {r['stage']:<16} {r['status']:<12}"
        if run:
            dur = f"{run['duration_s']:.0f}s" if run["duration_s"] is not None else "-"
            code = "" if run["exit_code"] is None else f" exit {run['exit_code']}"
            line += f" {run['id']} {run['state']} on {run['host']} {dur}{code}"
        click.echo(line)
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
