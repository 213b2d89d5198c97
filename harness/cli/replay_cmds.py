"""`harness replay`, `harness rebuild`, `harness import`, `harness export`."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from harness import replay as rp
from harness.agents.registry import agents
from harness.agents.todolist import todo_json
from harness.cli.common import common_options, emit_json, harness, json_option
from harness.cli.todo_cmds import BADGE, GLYPH, print_board
from harness.errors import KNOWN_ERRORS, NoSession, UsageError, exit_code, render
from harness.export import FORMATS as EXPORT_FORMATS
from harness.export import export_lines
from harness.importers import ImportReport, directory_agent, formats, import_path
from harness.paths import set_current_session
from harness.render import safe_line
from state.fold import SessionState, TodoState, board_key
from state.maintain.rebuild import rebuild as rebuild_store

COMPACT_MAX = 40


def _when(ts: str | None) -> str:
    return ts[:19].replace("T", " ") if ts else "?"


def compact(todos: list[TodoState]) -> str:
    """The list in one line: a glyph and an id per todo, and the count done."""
    if not todos:
        return "(empty)"
    shown = " ".join(f"{GLYPH.get(t.status, '?')}t{t.num}" for t in todos[:COMPACT_MAX])
    more = f" … +{len(todos) - COMPACT_MAX}" if len(todos) > COMPACT_MAX else ""
    done = sum(t.status == "completed" for t in todos)
    return f"{shown}{more}  ({done}/{len(todos)} done)"


def _state_json(state: SessionState, name: str, last: int, ev: Any) -> dict[str, Any]:
    by_num = state.todos
    return {
        "session": name, "n": state.n, "last_n": last,
        "ts": ev.ts if ev else None, "actor": ev.actor if ev else None,
        "todos": [todo_json(t, by_num) for t in sorted(by_num.values(), key=board_key)],
        "runs": [r.__dict__ for r in sorted(state.runs.values(), key=lambda r: r.id)],
        "verifications": [v.__dict__ for v in
                          sorted(state.verifications.values(), key=lambda v: v.id)],
        "artifacts": [a.__dict__ for a in sorted(state.artifacts.values(), key=lambda a: a.id)],
    }


@click.command()
@click.option("--at", "at", metavar="N", help="Event number N (default: the last).")
@click.option("--time", "when", metavar="T",
              help="The last event at or before time T (ISO 8601; no zone means UTC).")
@click.option("--steps", is_flag=True,
              help="Print each change in order: event number, time, actor, what changed, "
                   "and the list after it (up to --at, from --from).")
@click.option("--from", "start", type=int, default=1, show_default=True, metavar="N",
              help="With --steps: the first event to show.")
@click.option("--diff", "diff_points", nargs=2, metavar="A B",
              help="What changed from point A to point B (event numbers or times).")
@click.option("--fork", "fork_name", metavar="NAME",
              help="Start session NAME from the list at --at/--time (like checking out an "
                   "old commit into a branch); it becomes the current session.")
@common_options
@json_option
def replay(at: str | None, when: str | None, steps: bool, start: int,
           diff_points: tuple[str, str] | None, fork_name: str | None, as_json: bool) -> None:
    """Show a session as it was at any past event or time, step through its changes,
    compare two moments, or fork a new session from one.

    \b
    harness replay --at 12              the list just after event 12
    harness replay --time 2026-11-30T14:00
    harness replay --steps              every change, with the list after it
    harness replay --diff 12 40         what changed between events 12 and 40
    harness replay --fork retry --at 12 a new session from the list at event 12
    """
    if at is not None and when is not None:
        raise UsageError("give --at or --time, not both")
    if sum(bool(x) for x in (steps, diff_points, fork_name)) > 1:
        raise UsageError("give one of --steps, --diff and --fork")
    h = harness()
    sess = h.session()
    store, sid = h.store, sess.id
    last = store.last_n(sid)
    n = last
    if at is not None:
        n = rp.point(store, sid, at)
    elif when is not None:
        n = rp.n_at_time(store, sid, when)
    if diff_points:
        _print_diff(store, sid, sess.name, diff_points, as_json)
        return
    if fork_name:
        if at is None and when is None:
            raise UsageError("--fork needs --at N or --time T")
        new_id = rp.fork(store, sid, fork_name, n)
        set_current_session(store.url, fork_name)
        count = len(store.todos(new_id))
        if as_json:
            emit_json({"session": fork_name, "parent": sess.name, "fork_n": n, "todos": count})
        else:
            click.echo(f"forked session {fork_name} from {sess.name} at event {n}: "
                       f"{count} todos (now current)")
        return
    if steps:
        _print_steps(store, sid, start, n, as_json)
        return
    state = rp.list_at(store, sid, n)
    ev = store.events(sid, after_n=n - 1, upto_n=n)[0] if n else None
    if as_json:
        emit_json(_state_json(state, sess.name, last, ev))
        return
    head = f"event {n} of {last}" + (f", {_when(ev.ts)} by {ev.actor}" if ev else "")
    todos = sorted(state.todos.values(), key=board_key)
    if not todos:
        click.echo(f"session {sess.name} at {head}: no todos")
        return
    print_board(todos, f"{sess.name} at {head}")


def _print_steps(store: Any, sid: int, start: int, end: int, as_json: bool) -> None:
    out = sys.stdout
    first = True
    if as_json:
        out.write("[")
    for step in rp.steps(store, sid, start=start, end=end):
        ev = step.event
        if as_json:
            out.write(("\n  " if first else ",\n  ") + json.dumps({
                "n": ev.n, "ts": ev.ts, "actor": ev.actor, "kind": ev.kind,
                "todo_id": f"t{ev.todo_id}" if ev.todo_id is not None else None,
                "ref": ev.ref, "description": step.description,
                "todos": [{"id": t.id, "status": t.status, "content": t.content}
                          for t in step.todos]}, ensure_ascii=False))
        else:
            tid = f"t{ev.todo_id}" if ev.todo_id is not None else ""
            click.echo(f"#{ev.n:<5} {_when(ev.ts)}  {safe_line(ev.actor, 16):<16} {tid:<5} "
                       f"{step.description}")
            click.echo(f"{'':7}{compact(step.todos)}")
        first = False
    if as_json:
        out.write("\n]\n" if not first else "]\n")


def _print_diff(store: Any, sid: int, name: str, points: tuple[str, str],
                as_json: bool) -> None:
    a, b = (rp.point(store, sid, p) for p in points)
    d = rp.diff(store, sid, a, b)
    if as_json:
        emit_json({"session": name, "a": a, "b": b, "events": d.events, "actors": d.actors,
                   "added": [todo_json(t, {}) for t in d.added],
                   "removed": [todo_json(t, {}) for t in d.removed],
                   "changed": [{"id": t.id, "content": t.content, "changes": ch}
                               for t, ch in d.changed]})
        return
    who = ", ".join(f"{actor} ×{count}" for actor, count in
                    sorted(d.actors.items(), key=lambda kv: -kv[1]))
    click.echo(f"session {name}: event {a} -> event {b}: {d.events} events"
               + (f" ({who})" if who else ""))
    if d.empty:
        click.echo("  the todo list is the same")
    for t in d.added:
        click.echo(f"  + {t.id:<4} [{BADGE.get(t.priority, '?')}] {safe_line(t.content, 70)}"
                   f" ({t.status})")
    for t in d.removed:
        click.echo(f"  - {t.id:<4} [{BADGE.get(t.priority, '?')}] {safe_line(t.content, 70)}"
                   f" (was {t.status})")
    for t, changes in d.changed:
        parts = "; ".join(f"{k} {safe_line(repr(o), 40)} -> {safe_line(repr(v), 40)}"
                          for k, (o, v) in changes.items())
        click.echo(f"  ~ {t.id:<4} {safe_line(t.content, 40)}: {parts}")


@click.command()
@click.option("--check", is_flag=True,
              help="Only compare: report differences, change nothing (exit 1 if any).")
@common_options
@json_option
def rebuild(check: bool, as_json: bool) -> None:
    """Recreate every projection (todos, runs, verifications, artifacts, snapshots) from
    the events alone, and report where the stored ones differed.

    Works on every session, or only on the one --session names. Writers wait while a
    session is rebuilt; readers do not.
    """
    h = harness()
    only = click.get_current_context().find_root().meta.get("harness.session")
    ids = None
    if only:
        row = h.store.session_by_name(only)
        if row is None:
            raise NoSession(f"no session named {only!r}", where=h.store.where)
        ids = [row.id]
    progress = None
    if sys.stderr.isatty():
        def progress(name: str, done: int, total: int) -> None:
            click.echo(f"\r{'checking' if check else 'rebuilding'} {name}: "
                       f"{done:,}/{total:,} events", err=True, nl=done >= total)
    report = rebuild_store(h.store, session_ids=ids, check=check, progress=progress)
    if as_json:
        emit_json(report.to_json())
    else:
        verb = "checked" if check else "rebuilt"
        click.echo(f"{verb} {report.sessions} session(s): {report.events:,} events, "
                   f"{report.snapshots:,} snapshots; "
                   f"{len(report.differences)} difference(s)"
                   + (" from the events" if report.differences else ""))
        for d in report.differences[:50]:
            click.echo(f"  {safe_line(str(d), 150)}")
        if len(report.differences) > 50:
            click.echo(f"  … and {len(report.differences) - 50} more (see --json)")
        if report.differences and not check:
            click.echo("the projections now follow the events")
    if check and report.differences:
        raise click.exceptions.Exit(1)


def _span(a: str | None, b: str | None) -> str:
    if not a or not b:
        return "no times"
    try:
        delta = datetime.fromisoformat(b.replace("Z", "+00:00")) - \
            datetime.fromisoformat(a.replace("Z", "+00:00"))
    except ValueError:
        return f"{_when(a)} → {_when(b)}"
    secs = int(delta.total_seconds())
    d, rem = divmod(secs, 86400)
    hrs, rem = divmod(rem, 3600)
    mins, s = divmod(rem, 60)
    length = (f"{d}d {hrs}h" if d else f"{hrs}h {mins}m" if hrs else f"{mins}m {s}s")
    return f"{_when(a)} → {_when(b)} ({length})"


def _print_report(r: ImportReport) -> None:
    what = "events" if r.format == "harness" else "todo calls"
    if r.format == "claude-tasks":
        new = " (new)" if r.session_created else ""
        state = (f"{r.imported} changed -> {r.events} events" if r.imported
                 else "already in sync")
        click.echo(f"{r.path} (claude-tasks): {r.calls} tasks into session "
                   f"{r.session}{new}: {state}")
        if r.malformed_count:
            click.echo("  skipped: " + "; ".join(reason for _, reason in r.malformed[:10]))
        return
    if r.calls == 0:
        click.echo(f"{r.path} ({r.format}): no {what} found; nothing imported")
    elif r.imported == 0:
        click.echo(f"{r.path} ({r.format}): already imported ({r.already} {what} in session "
                   f"{r.already_in or r.session}); nothing new")
    else:
        new = " (new)" if r.session_created else ""
        click.echo(f"imported {r.path} ({r.format}) into session {r.session}{new}")
        extra = f", {r.already} imported before" if r.already else ""
        made = "" if r.format == "harness" else f" -> {r.events} events"
        click.echo(f"  {r.imported} {what}{extra}{made}, {_span(r.first_ts, r.last_ts)}")
    skipped = []
    if r.non_todo:
        phrase = {"opencode-json": "messages or values without a todo call",
                  "opencode-export": "other tool calls"}.get(
            r.format, "lines that are not todo calls")
        skipped.append(f"{r.non_todo} {phrase}")
    for reason, count in sorted(r.skipped.items(), key=lambda kv: -kv[1]):
        skipped.append(f"{count} × {reason}")
    if r.malformed_count:
        lines = ", ".join(str(ln) for ln, _ in r.malformed[:10] if ln is not None)
        skipped.append(f"{r.malformed_count} malformed" + (f" (lines {lines}"
                       + (", …" if r.malformed_count > 10 else "") + ")" if lines else ""))
    if skipped:
        click.echo("  skipped: " + "; ".join(skipped))
    for note in r.notes:
        click.echo(f"  note: {note}")


@click.command("import")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(dir_okay=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["auto", *formats()]), default="auto",
              show_default=True, help="The transcript's format; auto reads it from the content.")
@click.option("--strict", is_flag=True,
              help="Import nothing from a file with any malformed line or invalid todo call.")
@click.option("--follow", is_flag=True,
              help="A folder an agent keeps its list in (a Claude Code task list): keep it "
                   "in sync as it changes, until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="With --follow: seconds between looks at the directory.")
@common_options
@json_option
def import_(files: tuple[Path, ...], fmt: str, strict: bool, follow: bool, interval: float,
            as_json: bool) -> None:
    h = harness()
    session = click.get_current_context().find_root().meta.get("harness.session")
    if follow:
        _follow_tasks(h, files, session, interval, as_json)
        return
    reports: list[dict[str, Any]] = []
    failed: BaseException | None = None

    def warn(text: str) -> None:
        click.echo(f"warning: {safe_line(text, 200)}", err=True)

    progress = None
    if sys.stderr.isatty():
        def progress(done: int, total: int) -> None:
            if total > 50 << 20:
                click.echo(f"\rimporting: {done * 100 // max(total, 1)}% of "
                           f"{total >> 20} MiB", err=True, nl=False)
    for path in files:
        try:
            r = import_path(h.store, path, session=session, fmt=fmt, strict=strict,
                            warn=warn, progress=progress)
        except KNOWN_ERRORS as exc:
            click.echo(render(exc), err=True)
            failed = failed or exc
            reports.append({"path": str(path), "error": str(exc)})
            continue
        if as_json:
            reports.append(r.to_json())
        else:
            _print_report(r)
    if as_json:
        emit_json(reports)
    if failed is not None:
        raise click.exceptions.Exit(exit_code(failed))


def _import_help() -> str:
    """`harness import --help`: every agent's formats, from the registry."""
    rows = [(fmt, text) for a in agents() for fmt, text in a.formats.items()]
    rows.append(("harness", "a `harness export` file (read back event for event)"))
    rows += [("DIRECTORY", a.directory_help) for a in agents() if a.directory_help]
    lines = []
    for name, text in rows:
        wrapped = textwrap.wrap(text, 62) or [""]
        head = f"{name:<16} " if len(name) < 17 else f"{name} "
        lines.append(head + wrapped[0])
        lines += [" " * 17 + w for w in wrapped[1:]]
    return ("Import agent transcripts: each todo call becomes the events a live todowrite "
            "would\nhave made, at its original time, with the tool-call id in `ref`.\n\n\b\n"
            + "\n".join(lines) + "\n\n"
            "Into --session NAME (created if needed), else a session named after the "
            "agent's own\nsession id. Importing the same file again adds nothing. Lines "
            "that are not todo calls\nare skipped quietly; malformed ones are reported "
            "with their line number and skipped\n(or, with --strict, nothing from that "
            "file is imported). Each file is one\ntransaction: if it fails, the store is "
            "as it was.")


import_.help = _import_help()


def _follow_tasks(h: Any, files: tuple[Path, ...], session: str | None, interval: float,
                  as_json: bool) -> None:
    kinds = " or ".join(a.directory_help or "" for a in agents() if a.directory_help)
    if len(files) != 1 or not files[0].is_dir():
        raise UsageError(f"--follow takes one directory: {kinds}")
    directory = files[0]
    owner = directory_agent(directory)
    if owner is None:
        raise UsageError(f"not a directory `harness import` follows (expected {kinds})",
                         where=str(directory))

    def echo(r: ImportReport) -> None:
        if as_json:
            click.echo(json.dumps(r.to_json(), ensure_ascii=False))
        else:
            _print_report(r)

    click.echo(f"following {directory} (every {interval:g}s; Ctrl-C to stop)", err=True)
    owner.follow_directory(h.store, directory, session=session, interval=interval, echo=echo)


@click.command()
@click.argument("name", required=False, metavar="[SESSION]")
@click.option("--format", "fmt", type=click.Choice(list(EXPORT_FORMATS)), default="jsonl",
              show_default=True, help="Output format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (default: standard output).")
@common_options
def export(name: str | None, fmt: str, output: Path | None) -> None:
    """Write SESSION's events (default: the current session) as JSONL, which
    `harness import` reads back: export, import, export gives the same bytes apart from
    ids."""
    h = harness()
    if name:
        row = h.store.session_by_name(name)
        if row is None:
            raise NoSession(f"no session named {name!r}", where=h.store.where)
    else:
        row = h.session()
    if output is None:
        for line in export_lines(h.store, row.id):
            click.echo(line)
        return
    # Write beside the target and rename, so a failed export leaves no half file.
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent or Path("."))
    try:
        count = 0
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            for line in export_lines(h.store, row.id):
                out.write(line + "\n")
                count += 1
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    click.echo(f"exported session {row.name}: {count} lines to {output}", err=True)


def register(cli: click.Group) -> None:
    for cmd in (replay, rebuild, import_, export):
        cli.add_command(cmd)
