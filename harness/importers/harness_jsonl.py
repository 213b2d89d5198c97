"""Reading back a ``harness export`` (see :mod:`harness.export`): the events, verbatim.

The events are written as they were (time, actor, kind, todo id, payload, ref), so the
session replays exactly as the original did; only store-wide ids change: the session's,
and those of runs, verifications and artifacts (renumbered, and the payloads that point
at them with them). The whole file is one transaction.

The import is recorded under the exported session's name and creation time, with the
last event number imported: importing the same export again adds nothing, and importing
a later export of the same session adds only the events that are new.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from typing import IO, Any

from harness.agents.transcripts import ImportReport, Skipped, json_error, read_lines
from harness.errors import InputError
from harness.export import EXPORT_VERSION, is_export_header
from state.store import Store, Tx

FLUSH_EVERY = 5000
_ID_FIELDS = {"run.queued": ("run", "runs"), "run.updated": ("run", "runs"),
              "verification.recorded": ("verification", "verifications"),
              "artifact.recorded": ("artifact", "artifacts")}


def import_export(store: Store, fh: IO[bytes], where: str, *, session: str | None,
                  strict: bool, report: ImportReport, warn: Callable[[str], None] | None,
                  tick: Callable[[], None]) -> None:
    lines = read_lines(fh)
    header: dict[str, Any] | None = None
    for num, raw in lines:
        if raw is None or not raw.strip():
            continue
        try:
            header = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise InputError(f"header: {json_error(exc)}", where=f"{where}:{num}") from None
        break
    if not is_export_header(header):
        raise InputError("not a harness export (no session header on the first line)",
                         where=where)
    assert header is not None
    if int(header.get("version", 0)) > EXPORT_VERSION:
        raise InputError(f"export version {header['version']} is newer than this harness "
                         f"reads ({EXPORT_VERSION})", where=where, hint="upgrade todo-harness")
    key = f"harness:{header.get('name')}@{header.get('created_at')}"
    seen = store.source_seen(key)
    done_n = 0
    target = session or str(header.get("name"))
    if seen is not None:
        row = store.session_by_id(seen[0])
        seen_name = row.name if row else str(seen[0])
        if session is None or session == seen_name:
            target, done_n = seen_name, seen[1]
        else:
            report.already_in = seen_name
    report.session = target
    ids: dict[str, dict[int, int]] = {"runs": {}, "verifications": {}, "artifacts": {}}

    def bad(num: int, reason: str) -> None:
        if strict:
            raise InputError(f"{reason} (--strict: nothing imported)", where=f"{where}:{num}")
        if warn is not None and report.malformed_count < 20:
            warn(f"{where}:{num}: {reason}; skipped")
        report.skip(Skipped(num, reason, True))

    with ExitStack() as stack:
        tx: Tx | None = None
        for num, raw in lines:
            tick()
            if raw is None:
                bad(num, "line too long (raise HARNESS_IMPORT_MAX_LINE)")
                continue
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                bad(num, json_error(exc))
                continue
            kind = obj.get("type") if isinstance(obj, dict) else None
            if kind == "event":
                ev_n = obj.get("n")
                if not isinstance(ev_n, int) or not isinstance(obj.get("kind"), str) \
                        or not isinstance(obj.get("payload"), dict) \
                        or not isinstance(obj.get("ts"), str) \
                        or not isinstance(obj.get("actor"), str):
                    bad(num, "event without n, ts, actor, kind and payload")
                    continue
                report.calls += 1
                if ev_n <= done_n or report.already_in is not None:
                    report.already += 1
                    continue
                if tx is None:
                    tx = stack.enter_context(_open(store, header, target, obj, report, where))
                    report.saw(obj["ts"])
                    report.imported += 1
                    continue  # event 1 (session.created) is the session itself
                if ev_n != tx.state.n + 1:
                    bad(num, f"event {ev_n} where {tx.state.n + 1} was expected "
                             "(lines missing?); imported as the next event")
                _emit(tx, obj, ids)
                report.imported += 1
                report.events += 1
                report.saw(obj["ts"])
                if report.events % FLUSH_EVERY == 0:
                    tx.flush()
            elif kind == "agent_view":
                if tx is not None and isinstance(obj.get("actor"), str) \
                        and obj.get("view") is not None:
                    tx.set_agent_view(obj["actor"], obj["view"], ts=obj.get("updated_at"))
            else:
                bad(num, f"unknown line type {kind!r}")
        if tx is not None:
            tx.record_source(key)


def _open(store: Store, header: dict[str, Any], name: str, first: dict[str, Any],
          report: ImportReport, where: str) -> Any:
    row = store.session_by_name(name)
    if row is not None:
        if first.get("n") == 1:
            raise InputError(f"session {name!r} already exists", where=where,
                             hint="import it under another name with --session NAME")
        return store.write(row.id, "import")
    if first.get("n") != 1 or first.get("kind") != "session.created":
        raise InputError("the export does not start with its session.created event",
                         where=where)
    parent = header.get("parent")
    prow = store.session_by_name(parent) if isinstance(parent, str) else None
    report.session_created = True
    report.events += 1
    return store.write_new(name, actor=first["actor"], created_by=first["actor"],
                           ts=first["ts"], pipeline=header.get("pipeline"),
                           parent_id=prow.id if prow else None,
                           fork_n=header.get("fork_n") if prow else None)


def _emit(tx: Tx, obj: dict[str, Any], ids: dict[str, dict[int, int]]) -> None:
    kind = obj["kind"]
    payload = dict(obj["payload"])
    spec = _ID_FIELDS.get(kind)
    if spec is not None:
        field, table = spec
        old = payload.get(field)
        if isinstance(old, int):
            if kind.endswith((".queued", ".recorded")):
                ids[table][old] = tx.new_id(table)
            payload[field] = ids[table].get(old, old)
        run = payload.get("run_id")
        if isinstance(run, int):
            payload["run_id"] = ids["runs"].get(run, run)
    tx.emit(kind, todo_id=obj.get("todo_id"), payload=payload, ts=obj["ts"],
            ref=obj.get("ref"), actor=obj["actor"])
