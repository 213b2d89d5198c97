"""Claude Code's on-disk task lists: ``~/.claude/tasks/<list id>/<task id>.json``.

Claude Code keeps each task of a list in a file of its own (one JSON object: ``id``,
``subject``, ``description``, ``activeForm``, ``status`` pending/in_progress/completed,
``blocks`` and ``blockedBy`` as lists of task ids, maybe ``owner`` and ``metadata``),
beside a ``.lock`` and a ``.highwatermark``. The list id is ``CLAUDE_CODE_TASK_LIST_ID``
when a list is shared, else the Claude session's id; a deleted task's file is gone.

:func:`sync_task_list` makes the session's list say what the directory says, in one
transaction, as ``agent:claude-code``: a task it has not seen is created, a changed one
updated (``blockedBy``/``blocks`` become dependencies, a cycle is dropped), and a task
whose file went away is removed, unless it was completed (Claude Code drops finished
tasks' files; the record keeps them). Claude's ids are mapped to ours in the same agent view
the hooks use (``<list id>:<task id>``), so a list followed here and the same list seen
through ``harness hook claude-code`` are one list, never two. Syncing again with nothing
changed writes nothing. :func:`follow` syncs whenever a file changes (``--follow``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.agents.claude.hooks import ACTOR
from harness.agents.claude.tasks import (
    TASK_STATUSES,
    create_task,
    load_map,
    save_map,
    status_change,
)
from harness.agents.transcripts import ImportReport
from harness.errors import InputError
from state.store import Store, Tx, normalize_ts

FORMAT = "claude-tasks"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-", re.I)
MAX_TASK_BYTES = 1 << 20


@dataclass
class Task:
    id: str
    subject: str
    status: str
    active_form: str | None
    description: str | None
    blocked_by: list[str]
    blocks: list[str]
    mtime: float


def is_task_list(directory: Path) -> bool:
    """A directory that looks like one of Claude Code's task lists."""
    try:
        names = [p.name for p in directory.iterdir()]
    except OSError:
        return False
    return any(n.endswith(".json") for n in names) or ".highwatermark" in names \
        or ".lock" in names


def default_session(directory: Path) -> str:
    """A shared list's id is the work's name; a session's own list is named like that
    session's transcript import (``claude-<first 8 of its id>``)."""
    name = directory.resolve().name
    return f"claude-{name[:8]}" if _UUID.match(name) else name


def read_tasks(directory: Path, report: ImportReport) -> dict[str, Task] | None:
    """Every readable task file (unreadable ones are counted and skipped); None when a
    file changed while being read (read again)."""
    tasks: dict[str, Task] = {}
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", where=str(directory)) from None
    for path in entries:
        if not path.name.endswith(".json") or path.name.startswith("."):
            continue
        try:
            st = path.stat()
            if st.st_size > MAX_TASK_BYTES:
                report.skip_reason(f"{path.name}: over {MAX_TASK_BYTES} bytes", True)
                continue
            raw = path.read_bytes()
        except FileNotFoundError:
            continue  # deleted while we looked: it is a deleted task
        except OSError as exc:
            report.skip_reason(f"{path.name}: cannot read ({exc.strerror})", True)
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            if not raw.strip():
                return None  # Claude is writing it: try again in a moment
            report.skip_reason(f"{path.name}: not JSON", True)
            continue
        task = _task(obj, path, st.st_mtime, report)
        if task is not None:
            tasks[task.id] = task
    return tasks


def _task(obj: Any, path: Path, mtime: float, report: ImportReport) -> Task | None:
    if not isinstance(obj, dict):
        report.skip_reason(f"{path.name}: not a JSON object", True)
        return None
    tid = obj.get("id", path.stem)
    subject = obj.get("subject")
    status = obj.get("status", "pending")
    if not isinstance(subject, str) or not subject.strip():
        report.skip_reason(f"{path.name}: missing subject", True)
        return None
    if status == "deleted":
        return None
    if status not in TASK_STATUSES:
        report.skip_reason(f"{path.name}: unknown status {status!r}", True)
        return None

    def ids(key: str) -> list[str]:
        value = obj.get(key)
        return [str(v) for v in value] if isinstance(value, list) else []

    active = obj.get("activeForm")
    desc = obj.get("description")
    return Task(id=str(tid), subject=subject, status=status,
                active_form=active if isinstance(active, str) else None,
                description=desc if isinstance(desc, str) else None,
                blocked_by=ids("blockedBy"), blocks=ids("blocks"), mtime=mtime)


def sync_task_list(store: Store, directory: str | os.PathLike[str], *,
                   session: str | None = None) -> ImportReport:
    """Make the session's list what the task directory says (see the module doc)."""
    d = Path(directory)
    where = str(d)
    if not d.is_dir():
        raise InputError("not a directory", where=where)
    report = ImportReport(path=where, format=FORMAT)
    for _ in range(20):
        tasks = read_tasks(d, report)
        if tasks is not None:
            break
        time.sleep(0.05)
    else:
        raise InputError("task files keep changing; try again", where=where)
    list_id = d.resolve().name
    name = session or default_session(d)
    report.session = name
    report.calls = len(tasks)
    if tasks:
        report.first_ts = normalize_ts(min(t.mtime for t in tasks.values()))
        report.last_ts = normalize_ts(max(t.mtime for t in tasks.values()))
    row = store.session_by_name(name)
    if row is None:
        if not tasks:
            return report
        report.session_created = True
        ctx = store.write_new(name, actor=ACTOR, created_by="import", ts=report.first_ts)
    else:
        ctx = store.write(row.id, ACTOR, heartbeat=False)
    with ctx as tx:
        before = tx.emitted
        changed = _apply(tx, list_id, tasks)
        report.imported = changed
        report.events = tx.emitted - before
    return report


def _apply(tx: Tx, list_id: str, tasks: dict[str, Task]) -> int:
    from harness.todos import reaches

    mapping = load_map(tx)
    prefix = list_id + ":"
    index = {v.agent_id: i for i, v in enumerate(mapping)
             if v.agent_id and v.num in tx.state.todos}
    changed: set[str] = set()
    map_changed = False
    for tid, task in sorted(tasks.items(), key=lambda kv: _order(kv[0])):
        key = prefix + tid
        ts = normalize_ts(task.mtime)
        i = index.get(key)
        if i is None:
            create_task(tx, mapping, key, task.subject, active_form=task.active_form,
                        description=task.description, status=task.status, ts=ts)
            index[key] = len(mapping) - 1
            changed.add(tid)
            map_changed = True
            continue
        item = mapping[i]
        assert item.num is not None
        todo = tx.todo(item.num)
        changes = status_change(todo, item, task.status)
        if task.subject != item.content:
            changes["content"] = task.subject
        if task.active_form != item.active_form:
            changes["active_form"] = task.active_form
        if tx.update_todo(item.num, ts=ts, **changes):
            changed.add(tid)
        new_item = item._replace(status=task.status, content=task.subject,
                                 active_form=task.active_form)
        if new_item != item:
            mapping[i] = new_item
            map_changed = True
    # Dependencies, once every task has a todo: blockedBy is ours depends_on, and so is
    # the other side of blocks.
    num_of = {tid: mapping[index[prefix + tid]].num for tid in tasks}
    wanted: dict[int, set[int]] = {n: set() for n in num_of.values() if n is not None}
    for tid, task in tasks.items():
        me = num_of[tid]
        for other in task.blocked_by:
            if other in num_of and num_of[other] != me:
                wanted[me].add(num_of[other])  # type: ignore[index,arg-type]
        for other in task.blocks:
            if other in num_of and num_of[other] != me:
                wanted[num_of[other]].add(me)  # type: ignore[index,arg-type]
    of_list = {v.num for v in mapping if v.agent_id and v.agent_id.startswith(prefix)}
    for tid, num in sorted(num_of.items(), key=lambda kv: _order(kv[0])):
        assert num is not None
        todo = tx.todo(num)
        deps = [d for d in sorted(wanted[num]) if not reaches(tx, [d], num)]
        # Dependencies a person added stay; the list's own are what the files say.
        keep = [d for d in todo.depends_on if d not in of_list]
        new = sorted({*keep, *deps})
        if new != sorted(todo.depends_on) and tx.update_todo(
                num, depends_on=new, ts=normalize_ts(tasks[tid].mtime)):
            changed.add(tid)
    # A task whose file is gone was deleted in Claude Code; but a completed one is kept:
    # Claude Code drops finished tasks' files (claude-code #78147), and a finished task
    # is still part of the work's record (`harness show` says its file is gone).
    for v in list(mapping):
        if v.agent_id and v.agent_id.startswith(prefix) and v.num in tx.state.todos \
                and v.agent_id[len(prefix):] not in tasks \
                and tx.state.todos[v.num].status not in ("completed", "cancelled"):
            tx.remove_todo(v.num, reason=f"deleted in Claude Code (task list {list_id})")
            mapping.remove(v)
            changed.add(v.agent_id)
            map_changed = True
    if map_changed:
        save_map(tx, mapping)
    return len(changed)


def _order(tid: str) -> tuple[int, str]:
    return (int(tid), "") if tid.isdigit() else (1 << 30, tid)


def _signature(directory: Path) -> tuple[tuple[str, int, int], ...]:
    try:
        return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size)
                            for p in directory.iterdir() if p.name.endswith(".json")))
    except OSError:
        return ()


def follow(store: Store, directory: Path, *, session: str | None = None,
           interval: float = 1.0, echo: Callable[[ImportReport], None],
           passes: int | None = None) -> None:
    """Sync now, then again whenever a task file changes, until Ctrl-C (or ``passes``)."""
    last: tuple[tuple[str, int, int], ...] | None = None
    n = 0
    while passes is None or n < passes:
        sig = _signature(directory)
        if sig != last:
            report = sync_task_list(store, directory, session=session)
            last = sig
            echo(report)
        n += 1
        if passes is None or n < passes:
            time.sleep(interval)
