"""`harness metrics|plot|report`: the series stages recorded, listed, drawn in the
terminal, and put on one page with the board."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from harness.charts.model import charts, label_text, summaries
from harness.charts.targets import Target, recorded, resolve
from harness.cli.common import common_options, emit_json, harness, json_option
from harness.errors import HarnessError, UsageError
from harness.render import aligned, safe_line

PLOT_HEIGHT = 16
MAX_WIDTH = 160


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return safe_line(v, 24)
    return f"{v:.4g}" if isinstance(v, float) else str(v)


@click.command()
@click.argument("todo_id", metavar="[TODO]", required=False)
@common_options
@json_option
def metrics(todo_id: str | None, as_json: bool) -> None:
    """List the series a stage recorded: each metric (with its labels), its axis, how many
    points, the x range and the last, lowest and highest value.

    TODO is a todo (t7), the stage bound to one (train), or a run (r12), in another
    session as SESSION:t7; its newest run that recorded series is listed. Without TODO,
    every todo of the session that recorded any. --json adds every point.
    """
    h = harness()
    sess = h.session()
    if todo_id is None:
        targets = recorded(h.store, sess.id)
        if as_json:
            emit_json({"session": sess.name, "runs": [_run_json(h, t) for t in targets]})
            return
        if not targets:
            click.echo(f"session {sess.name}: no series recorded yet (stages record them "
                       "while they run; docs/pipelines.md, \"Series\")")
            return
        click.echo(f"session {sess.name}")
        rows = []
        for t in targets:
            names = t.series(h.store).metrics
            rows.append([t.todo.id if t.todo else "-", t.run.stage or "-", f"r{t.run.id}",
                         t.run.state, ", ".join(names)])
        for line in aligned(rows, caps=[None, 20, None, None, None]):
            click.echo(f"  {line}")
        return
    target = resolve(h.store, sess.id, todo_id)
    if as_json:
        emit_json(_run_json(h, target))
        return
    points = h.store.series([target.run.id])
    head = f"{target.label} ({target.run.state}, session {target.session})"
    if not points:
        click.echo(f"{head}: no series recorded")
        return
    listed = summaries(points)
    click.echo(f"{head}: {len(listed)} series, {len(points)} points")
    rows = [["metric", "labels", "axis", "points", "x from", "to", "last", "min", "max"]]
    for s in listed:
        rows.append([s.metric, label_text(s.labels) or "-", s.axis, str(s.points),
                     _num(s.first_x), _num(s.last_x), _num(s.last), _num(s.low),
                     _num(s.high)])
    for line in aligned(rows):
        click.echo(f"  {line}")


def _run_json(h: Any, target: Target) -> dict[str, Any]:
    points = h.store.series([target.run.id])
    return {"session": target.session, "todo": target.todo.id if target.todo else None,
            "stage": target.run.stage, "run": f"r{target.run.id}",
            "state": target.run.state, "series": [s.to_json() for s in summaries(points)]}


def _colour(choice: bool | None) -> bool:
    if choice is not None:
        return choice
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ \
        and os.environ.get("TERM") != "dumb"


@click.command()
@click.argument("todo_id", metavar="TODO")
@click.argument("names", metavar="[METRIC]...", nargs=-1)
@click.option("--compare", "others", multiple=True, metavar="TODO2",
              help="Overlay another run of the same stage (a todo, stage, run or "
                   "SESSION:t7, as TODO); may be given more than once.")
@click.option("--width", type=click.IntRange(30, 400), metavar="N",
              help="Columns (default: the terminal's, at most 160).")
@click.option("--height", type=click.IntRange(8, 200), default=PLOT_HEIGHT,
              show_default=True, metavar="N", help="Lines per chart.")
@click.option("--color/--no-color", "colour", default=None,
              help="Colours (default: when stdout is a terminal and NO_COLOR is unset); "
                   "without them, each line of a chart draws with a glyph of its own "
                   "(•, +, x, ...) named in its legend.")
@common_options
def plot(todo_id: str, names: tuple[str, ...], others: tuple[str, ...], width: int | None,
         height: int, colour: bool | None) -> None:
    """Draw the series a stage recorded, in the terminal: one chart per METRIC (default:
    every one it recorded), a line per label set (per position, per server).

    TODO is as for `harness metrics` (t7, train, r12, SESSION:t7). --compare overlays
    another run, for example this week's training against last week's:
    `harness plot train loss --compare lastweek:train`.
    """
    h = harness()
    sess = h.session()
    targets = [resolve(h.store, sess.id, todo_id), *(resolve(h.store, sess.id, o)
                                                     for o in others)]
    runs = [t.series(h.store, label=_overlay_label(t, targets)) for t in targets]
    if not runs[0].points:
        raise UsageError(f"{targets[0].label} recorded no series", where=todo_id,
                         hint="stages record series while they run (docs/pipelines.md, "
                              "\"Series\"); `harness metrics` lists what there is")
    known = {m for r in runs for m in r.metrics}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"no series {unknown[0]!r} in {targets[0].label}", where=todo_id,
                         hint=f"recorded: {', '.join(runs[0].metrics)}")
    width = width or min(shutil.get_terminal_size((100, 24)).columns, MAX_WIDTH)
    from harness.charts.terminal import render

    shown = charts(runs, names)
    click.echo(_heading(targets))
    use = _colour(colour)
    for chart in shown:
        # click drops colour codes unless told: stdout may be a pipe to `less -R`
        click.echo(render(chart, width, height, colour=use), color=use)


def _overlay_label(t: Target, all_: list[Target]) -> str:
    """``r9``; with the session's name when the runs come from several sessions."""
    sessions = {x.session for x in all_}
    return f"{t.session}:r{t.run.id}" if len(sessions) > 1 else f"r{t.run.id}"


def _heading(targets: list[Target]) -> str:
    first = f"{targets[0].label} ({targets[0].run.state})"
    if len(targets) == 1:
        return first
    return first + " against " + ", ".join(f"{t.label} ({t.session})" for t in targets[1:])


@click.command()
@click.option("--html", "html_path", required=True, type=click.Path(dir_okay=False,
                                                                    path_type=Path),
              metavar="FILE", help="Write the report here (one self-contained HTML file).")
@click.option("--history", "history", type=click.IntRange(0, 10_000), default=40,
              show_default=True, metavar="N", help="The session's last N changes.")
@common_options
def report(html_path: Path, history: int) -> None:
    """Write one self-contained HTML page about the session, to attach to a message: the
    board, each stage's charts, the verification and served tables, and the last changes.
    Charts are inline SVG; the page loads nothing else (no script, style sheet or font
    from elsewhere)."""
    from harness.charts.report import build_report

    h = harness()
    sess = h.session()
    page = build_report(h.store, sess.id, history=history)
    try:
        html_path.write_text(page, encoding="utf-8")
    except OSError as exc:
        # A path that cannot be written is the user's to fix (1), not a misused flag (2).
        raise HarnessError(f"cannot write the report ({exc.strerror or exc})",
                           where=str(html_path)) from None
    click.echo(f"{html_path}: session {sess.name}, {len(page.encode()) // 1024 + 1} KiB")


def register(cli: click.Group) -> None:
    cli.add_command(metrics)
    cli.add_command(plot)
    cli.add_command(report)


__all__ = ["metrics", "plot", "register", "report"]
