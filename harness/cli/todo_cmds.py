"""Todo commands for people: add, list, show, mark, block, reprioritise, move, edit, note, log."""

from __future__ import annotations

from collections.abc import Sequence

import click

from harness import todos as uc
from harness.cli.common import common_options, emit_json, harness, json_option
from harness.errors import InputError, UsageError
from harness.render import (
    BADGE,
    GLYPH,
    SECTION,
    aligned,
    claim_label,
    claim_text,
    describe,
    safe_line,
    safe_text,
)
from harness.served_view import comparisons
from state.fold import STATUSES, TodoState, board_key, unmet_dependencies
from state.leases import Lease

PRIORITY_CHOICE = click.Choice(["high", "medium", "low", "H", "M", "L", "h", "m", "l"])


def _row(t: TodoState, by_num: dict[int, TodoState], width: int = 72,
         leases: tuple[float | None, dict[int, Lease]] = (None, {})) -> str:
    line = f"  {GLYPH.get(t.status, '?')} {t.id:<4} [{BADGE.get(t.priority, '?')}] " \
           f"{safe_line(t.content, width)}"
    extras = []
    now, live = leases
    claim = claim_label(t, live.get(t.num), now or 0.0)
    if claim is not None and t.status == "in_progress":
        extras.append(f"claimed by {claim}")
    if t.stage:
        extras.append(f"stage {t.stage}")
    waits = unmet_dependencies(t, by_num)
    if waits and t.status not in ("completed", "cancelled"):
        extras.append("waiting on " + ", ".join(f"t{d}" for d in waits))
    if t.status == "blocked" and t.blocked_reason:
        extras.append("blocked: " + safe_line(t.blocked_reason, 60))
    return line + ("  · " + " · ".join(extras) if extras else "")


def print_board(todos: Sequence[TodoState], session_name: str,
                leases: tuple[float | None, dict[int, Lease]] = (None, {})) -> None:
    by_num = {t.num: t for t in todos}
    done = sum(t.status == "completed" for t in todos)
    click.echo(f"session {session_name}: {done}/{len(todos)} completed")
    current = None
    for t in sorted(todos, key=board_key):
        if t.status != current:
            current = t.status
            count = sum(x.status == current for x in todos)
            click.echo(f"{SECTION.get(current, current)} ({count})")
        click.echo(_row(t, by_num, leases=leases))


@click.command()
@click.argument("text")
@click.option("--priority", "-p", type=PRIORITY_CHOICE, default="medium", show_default=True)
@click.option("--stage", metavar="NAME", help="Bind the todo to a pipeline stage (one no other "
              "todo of the session holds).")
@click.option("--move-stage", is_flag=True,
              help="With --stage: take the stage from the todo that holds it.")
@click.option("--depends", "-d", "depends", multiple=True, metavar="ID",
              help="A todo this one waits for (repeatable).")
@common_options
@json_option
def add(text: str, priority: str, stage: str | None, move_stage: bool,
        depends: tuple[str, ...], as_json: bool) -> None:
    """Add a todo with TEXT (stored exactly as given).

    `harness run` runs each stage as the one todo bound to it, so --stage on a stage that
    another todo holds is refused unless --move-stage says to move it.
    """
    if move_stage and stage is None:
        raise UsageError("--move-stage needs --stage NAME")
    h = harness()
    sid = h.session().id
    t = uc.add(h.store, sid, text, priority=priority, stage=stage, depends_on=depends,
               move_stage=move_stage)
    if as_json:
        from harness.agents.todolist import todo_json

        emit_json(todo_json(t, {t.num: t}))
    else:
        click.echo(f"added {t.id} [{BADGE[t.priority]}] {safe_line(t.content, 72)}")


@click.command("list")
@click.option("--status", "statuses", multiple=True, type=click.Choice(STATUSES),
              help="Only these statuses (repeatable).")
@common_options
@json_option
def list_(statuses: tuple[str, ...], as_json: bool) -> None:
    """List todos: by section (in progress, pending, blocked, completed, cancelled), then
    priority, then position. Shows what each todo is waiting on."""
    from harness.agents.todolist import live_leases, todo_json

    h = harness()
    sess = h.session()
    h.store.expire_lapsed(sess.id)  # a claim whose lease ran out is listed pending
    todos = h.store.todos(sess.id)
    by_num = {t.num: t for t in todos}
    shown = [t for t in todos if not statuses or t.status in statuses]
    shown.sort(key=board_key)
    leases = live_leases(h.store, sess.id, shown)
    if as_json:
        emit_json([todo_json(t, by_num, leases[1]) for t in shown])
        return
    if not shown:
        click.echo(f"session {sess.name}: no todos" + (" with that status" if statuses else ""))
        return
    print_board(shown, sess.name, leases)


@click.command()
@click.argument("todo_id", metavar="ID")
@common_options
@json_option
def show(todo_id: str, as_json: bool) -> None:
    """Show one todo: full text, fields, dependencies, notes, history and runs.

    Its history is one short line per event: what changed, from and to (`status:
    pending -> in_progress`), long values cut, a run's job as where it runs (`run r8 on
    local, pid 5625: queued -> running`). --json keeps every event whole. For a drafter's
    verify or benchmark todo, its offline (reference loop) and served (engine) figures are
    shown side by side.
    """
    from harness.agents.todolist import live_leases

    h = harness()
    sid = h.session().id
    num = uc.parse_id(todo_id)
    h.store.expire_lapsed(sid)  # a lease that ran out is ended before it is shown
    t = h.store.todo(sid, num)
    by_num = {x.num: x for x in h.store.todos(sid)}
    now, leases = live_leases(h.store, sid, [t])
    events = h.store.events(sid, todo_id=num)
    runs = h.store.runs(sid, todo_id=num)
    verifications = h.store.verifications(sid, todo_id=num)
    from harness.agents.registry import agents

    links = [link for a in agents() for link in a.links(h.store, sid, num)]
    if as_json:
        from harness.agents.todolist import todo_json  # the agent's JSON shape of a todo

        data = todo_json(t, by_num, leases)
        for link in links:
            data[link.key] = link.data
        data["history"] = [{**e.to_json(), "description": describe(e)} for e in events]
        data["notes"] = [{"ts": e.ts, "actor": e.actor, "text": e.payload.get("text", "")}
                         for e in events if e.kind == "todo.noted"]
        data["runs"] = [r.__dict__ for r in runs]
        data["verifications"] = [v.__dict__ for v in verifications]
        data["offline_and_served"] = [
            {"offline": f"v{c.offline.id}" if c.offline is not None else None,
             "served": f"v{c.served.id}",
             "rows": [{"figure": a, "offline": b, "served": c_} for a, b, c_ in c.rows()]}
            for c in comparisons(verifications, h.store.verifications(sid))]
        emit_json(data)
        return
    click.echo(f"{t.id}  {GLYPH.get(t.status, '?')} {t.status}  priority {t.priority}"
               f"  origin {t.origin}")
    click.echo(safe_text(t.content))
    if t.active_form:
        click.echo(f"active form: {safe_line(t.active_form)}")
    if t.stage:
        click.echo(f"stage: {t.stage}")
    if t.depends_on:
        waits = unmet_dependencies(t, by_num)
        click.echo("depends on: " + ", ".join(f"t{d}" for d in t.depends_on)
                   + (f" (waiting on {', '.join(f't{d}' for d in waits)})" if waits else ""))
    if t.status == "blocked":
        click.echo(f"blocked: {safe_text(t.blocked_reason or '')}")
    if t.claimed_by is not None:
        click.echo(claim_text(t, leases.get(t.num), now))
    for link in links:
        click.echo(link.text)
    notes = [e for e in events if e.kind == "todo.noted"]
    if notes:
        click.echo("notes:")
        for e in notes:
            click.echo(f"  {e.ts[:19].replace('T', ' ')}  {e.actor}: "
                       f"{safe_text(e.payload.get('text', ''))}")
    if runs:
        click.echo("runs:")
        for r in runs:
            code = "" if r.exit_code is None else f" exit {r.exit_code}"
            click.echo(f"  r{r.id} {r.state} on {r.host} (attempt {r.attempt}){code}"
                       + (f": {safe_line(r.reason, 80)}" if r.reason else ""))
            served = ((r.result or {}).get("metrics") or {})
            if isinstance(served.get("command"), str):  # a server's start, whole
                click.echo(f"    command: {safe_line(served['command'])}")
            if isinstance(served.get("fallback"), dict):
                click.echo(f"    fallback: {safe_line(str(served['fallback'].get('why', '')))}")
    if verifications:
        from harness.gates import TABLE, check_status, outcome

        click.echo("verifications:")
        for v in verifications:
            table = sum(1 for c in v.checks if check_status(c) == TABLE)
            click.echo(f"  v{v.id} {outcome(v.passed, v.checks, v.gate, v.metrics)}"
                       + (f" ({table} from the table, not checked)" if table else "")
                       + f": {safe_line(v.verdict, 90)}")
        for c in comparisons(verifications, h.store.verifications(sid)):
            # offline (the reference loop) and served (the engine) are different things:
            # side by side, each in its own column, never one for the other
            click.echo(f"{c.title}:")
            table = [["", "offline (reference loop)", "served (engine)"], *c.rows()]
            for text in aligned(table, caps=(None, 48, None), sep="   "):
                click.echo(f"  {text}")
    click.echo("history:")
    rows = [[f"#{e.n}", e.ts[:19].replace("T", " "), e.actor, describe(e)] for e in events]
    for text in aligned(rows, caps=(None, None, 40, None), sep=" "):
        click.echo(f"  {text}")


def _report(outcome: uc.Outcome, verb: str) -> None:
    t = outcome.todo
    if outcome.noop:
        click.echo(f"{t.id} is already {t.status if verb != 'priority' else t.priority}; "
                   "nothing changed")
    else:
        click.echo(f"{t.id} {verb}: " + "; ".join(
            f"{k} {safe_line(str(a), 40)} -> {safe_line(str(b), 40)}"
            for k, (a, b) in outcome.changed.items() if k != "blocked_reason" or b))


def _status_command(name: str, status: str, doc: str) -> click.Command:
    @click.command(name, help=doc)
    @click.argument("todo_id", metavar="ID")
    @common_options
    def command(todo_id: str) -> None:
        h = harness()
        sid = h.session().id
        outcome = uc.set_status(h.store, sid, todo_id, status)
        if status == "in_progress":
            t = outcome.todo
            waits = unmet_dependencies(t, {x.num: x for x in h.store.todos(sid)})
            if waits:
                click.echo(f"warning: {t.id} is waiting on "
                           + ", ".join(f"t{d}" for d in waits), err=True)
        _report(outcome, name)
    return command


start = _status_command("start", "in_progress", "Mark todo ID in progress.")
done = _status_command("done", "completed", "Mark todo ID completed.")
_cancel_todo = _status_command("cancel", "cancelled", "Cancel todo ID.")


@click.command()
@click.argument("ident", metavar="ID|RUN")
@common_options
def cancel(ident: str) -> None:
    """Cancel todo ID (t12: kept, shown as cancelled), or stop run RUN (r12: kill its
    process group on its host, record it cancelled, block its todo; for a finished serve
    run, stop the server it left running)."""
    if ident.strip().lower().startswith("r"):
        from harness.cli.run_cmds import cancel_run_cmd  # the runner: only for a run

        cancel_run_cmd(ident)
        return
    click.get_current_context().invoke(_cancel_todo, todo_id=ident)


@click.command()
@click.argument("todo_id", metavar="ID")
@click.option("--reason", "-r", required=True, help="Why it is blocked (shown on the board).")
@common_options
def block(todo_id: str, reason: str) -> None:
    """Block todo ID, with a reason."""
    h = harness()
    _report(uc.set_status(h.store, h.session().id, todo_id, "blocked", reason=reason), "block")


@click.command()
@click.argument("todo_id", metavar="ID")
@common_options
def unblock(todo_id: str) -> None:
    """Unblock todo ID (back to pending)."""
    h = harness()
    outcome = uc.unblock(h.store, h.session().id, todo_id)
    if outcome.noop:
        click.echo(f"{outcome.todo.id} is not blocked; nothing changed")
    else:
        _report(outcome, "unblock")


@click.command()
@click.argument("todo_id", metavar="ID")
@click.argument("level", type=click.Choice(["high", "medium", "low", "H", "M", "L", "h", "m",
                                            "l", "up", "down"]))
@common_options
def prio(todo_id: str, level: str) -> None:
    """Set the priority of todo ID: high|medium|low (or H/M/L), or up/down one step."""
    h = harness()
    _report(uc.set_priority(h.store, h.session().id, todo_id, level), "priority")


@click.command()
@click.argument("todo_id", metavar="ID")
@click.option("--up", is_flag=True, help="One place up among its neighbours.")
@click.option("--down", is_flag=True, help="One place down among its neighbours.")
@click.option("--to", "to", type=int, metavar="N", help="To place N (from 1).")
@common_options
def move(todo_id: str, up: bool, down: bool, to: int | None) -> None:
    """Move todo ID among its neighbours on the board (same section and priority)."""
    h = harness()
    outcome = uc.move(h.store, h.session().id, todo_id, up=up, down=down, to=to)
    if outcome.noop:
        click.echo(f"{outcome.todo.id} is already there; nothing changed")
    else:
        click.echo(f"moved {outcome.todo.id}")


@click.command()
@click.argument("todo_id", metavar="ID")
@click.argument("text", required=False)
@click.option("--stage", metavar="NAME", help="Bind the todo to this pipeline stage.")
@click.option("--no-stage", is_flag=True, help="Unbind the todo from its stage.")
@click.option("--move-stage", is_flag=True,
              help="With --stage: take the stage from the todo that holds it.")
@common_options
def edit(todo_id: str, text: str | None, stage: str | None, no_stage: bool,
         move_stage: bool) -> None:
    """Replace the text of todo ID, and/or its stage binding.

    A stage another todo holds is refused unless --move-stage says to move it.
    """
    if text is None and stage is None and not no_stage:
        raise UsageError("say what to change: TEXT, --stage NAME or --no-stage")
    if stage is not None and no_stage:
        raise UsageError("say --stage or --no-stage, not both")
    if move_stage and stage is None:
        raise UsageError("--move-stage needs --stage NAME")
    if text is not None and not text.strip():
        raise InputError("a todo needs some text")
    h = harness()
    sid = h.session().id
    changed = False
    if stage is not None or no_stage:
        # checked (and refused) before the text changes: nothing is half done
        changed |= not uc.bind_stage(h.store, sid, todo_id, stage,
                                     move_stage=move_stage).noop
    if text is not None:
        changed |= not uc.edit(h.store, sid, todo_id, text).noop
    num = uc.parse_id(todo_id)
    click.echo(f"edited t{num}" if changed else f"t{num} unchanged")


@click.command()
@click.argument("todo_id", metavar="ID")
@click.argument("text")
@common_options
def note(todo_id: str, text: str) -> None:
    """Add a note to todo ID (kept in its history)."""
    h = harness()
    t = uc.note(h.store, h.session().id, todo_id, text)
    click.echo(f"noted on {t.id}")


@click.command()
@click.argument("todo_id", metavar="ID")
@click.argument("depends", nargs=-1, metavar="[DEP]...")
@common_options
def depend(todo_id: str, depends: tuple[str, ...]) -> None:
    """Set what todo ID waits for (no DEP clears it). Cycles are refused."""
    h = harness()
    outcome = uc.set_depends(h.store, h.session().id, todo_id, depends)
    click.echo(f"{outcome.todo.id} unchanged" if outcome.noop else
               f"{outcome.todo.id} depends on "
               + (", ".join(f"t{d}" for d in outcome.todo.depends_on) or "nothing"))


@click.command()
@click.option("--todo", "todo_id", metavar="ID", help="Only this todo's events.")
@click.option("--limit", "-n", type=int, metavar="N", help="Only the last N events.")
@common_options
@json_option
def log(todo_id: str | None, limit: int | None, as_json: bool) -> None:
    """Show the session's history: who changed what, when, from what to what.

    One short line per event: number, time (UTC), actor, todo, and what changed, from
    and to, with long values cut and a run's job shown as where it runs. --json prints
    every event whole (its payload as stored) with that line as its `description`.
    """
    h = harness()
    sid = h.session().id
    events = h.store.events(sid, todo_id=uc.parse_id(todo_id) if todo_id else None)
    if limit is not None:
        events = events[-limit:] if limit > 0 else []
    if as_json:
        emit_json([{**e.to_json(), "description": describe(e)} for e in events])
        return
    rows = [[f"#{e.n}", e.ts[:19].replace("T", " "), e.actor,
             f"t{e.todo_id}" if e.todo_id is not None else "", describe(e)] for e in events]
    for text in aligned(rows, caps=(None, None, 40, None, None), sep=" "):
        click.echo(text)


def register(cli: click.Group) -> None:
    for cmd in (add, list_, show, start, done, cancel, block, unblock, prio, move, edit, note,
                depend, log):
        cli.add_command(cmd)
