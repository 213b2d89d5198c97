"""Importing one file: detect, parse, and apply each todo call as a live todowrite would.

**One transaction per file.** A file's calls go into the store in one write transaction
(flushed now and then, so memory stays bounded, but committed once): an import that
fails (an unreadable file, a store error, or any malformed line under ``--strict``)
leaves the store exactly as it was, and a session it would have created does not exist.
Files are independent: ``harness import a b`` commits ``a`` even if ``b`` then fails.

**The same events as live.** Each format is an agent's (:mod:`harness.agents.registry`:
the agent names its formats and reads its transcripts, :meth:`harness.agents.seam.Agent.transcript`).
Each call goes through :func:`harness.agents.todolist.apply_write`, the merge a live
``todowrite`` uses (a call that changes one item, as Gemini CLI's tracker, through the
change its hook makes), as the live hooks' actor (``agent:claude-code``, ``agent:pi``, ...)
with the call's original time and its tool-call id in ``ref``. The agent never read our answer, so its next write is
compared with what it sent (``sees_response=False``), as for hooks.

**Idempotent.** Each call's source key (format and tool-call id) is recorded in the
``imports`` table in the same transaction; a call already there is not applied again,
so importing the same file twice adds nothing.

The session is the one ``--session`` names (created if needed) or one named after the
agent's own session id (``claude-060f3873``); it is created at the transcript's first
time, by actor ``import``, only once there is a call to import.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from harness.agents.registry import by_format
from harness.agents.seam import Agent
from harness.agents.todolist import apply_write
from harness.agents.transcripts import (
    HEAD_BYTES,
    Call,
    ImportReport,
    Skipped,
    check_text,
)
from harness.errors import InputError
from harness.importers import harness_jsonl
from harness.importers.detect import detect, formats
from state.store import Store, Tx

IMPORT_ACTOR = "import"
FLUSH_EVERY = 500  # calls between flushes of one file's transaction

Warn = Callable[[str], None]
Progress = Callable[[int, int], None]

def _agent(fmt: str, where: str) -> Agent:
    found = by_format(fmt)
    if found is None:
        raise InputError(f"unknown format {fmt!r} (expected auto or {', '.join(formats())})",
                         where=where)
    return found


def session_name_for(fmt: str, hint: str | None, path: Path) -> str:
    found = by_format(fmt)
    prefix = found.session_prefix if found is not None else "import"
    if hint:
        core = re.sub(r"^(ses_|rollout-|checkpoint-)", "", hint)
        core = re.sub(r"[^\w.-]", "", core)[:12 if hint.startswith("ses_") else 8]
        if core:
            return f"{prefix}-{core}"
    return f"{prefix}-{path.stem}"


class _Progress:
    def __init__(self, fh: IO[bytes], total: int, cb: Progress | None):
        self.fh, self.total, self.cb = fh, total, cb
        self.next = 0

    def __call__(self) -> None:
        if self.cb is None:
            return
        try:
            pos = self.fh.tell()
        except (OSError, ValueError):
            return
        if pos >= self.next:
            self.cb(pos, self.total)
            self.next = pos + max(self.total // 100, 1 << 20)


def import_file(store: Store, path: str | os.PathLike[str], *, fmt: str = "auto",
                session: str | None = None, strict: bool = False,
                warn: Warn | None = None, progress: Progress | None = None) -> ImportReport:
    """Import one transcript (or a ``harness export``) into the store; see the module doc."""
    p = Path(path)
    where = str(p)
    report = ImportReport(path=where)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", where=where) from None
    with fh:
        if p.is_dir():
            raise InputError("is a directory, not a file", where=where)
        head = fh.read(HEAD_BYTES)
        check_text(head, where)
        fh.seek(0)
        report.format = detect(head, where) if fmt == "auto" else fmt
        size = os.fstat(fh.fileno()).st_size
        tick = _Progress(fh, size, progress)
        if report.format == "harness":
            harness_jsonl.import_export(store, fh, where, session=session, strict=strict,
                                        report=report, warn=warn, tick=tick)
            return report
        mtime = datetime.fromtimestamp(os.fstat(fh.fileno()).st_mtime, tz=timezone.utc)
        fallback = mtime.isoformat(timespec="microseconds").replace("+00:00", "Z")
        parser = _agent(report.format, where).transcript(report.format, fh, where, fallback)
        _apply_calls(store, parser, p, report, session=session, strict=strict, warn=warn,
                     tick=tick)
        report.non_todo = parser.non_todo
        report.notes.extend(parser.info.notes)
        if report.calls and report.first_ts == fallback == report.last_ts:
            report.notes.append("the transcript has no timestamps: used the file's time")
    return report


def _apply_calls(store: Store, parser: Any, path: Path, report: ImportReport, *,
                 session: str | None, strict: bool, warn: Warn | None,
                 tick: _Progress) -> None:
    where = str(path)
    with ExitStack() as stack:
        tx: Tx | None = None
        actor = ""
        def skip(item: Skipped) -> None:
            if item.malformed:
                at = f"{where}:{item.line}" if item.line else where
                if strict:
                    raise InputError(f"{item.reason} (--strict: nothing imported)", where=at)
                if warn is not None and report.malformed_count < 20:
                    warn(f"{at}: {item.reason}; skipped")
            report.skip(item)

        for item in parser:
            tick()
            if isinstance(item, Call):
                item = _nul_free(item)
            if isinstance(item, Skipped):
                skip(item)
                continue
            assert isinstance(item, Call)
            report.calls += 1
            if tx is None:
                seen = store.source_seen(item.key)
                if seen is not None:
                    report.already += 1
                    if report.already_in is None:
                        row = store.session_by_id(seen[0])
                        report.already_in = row.name if row else str(seen[0])
                    continue
                actor = _agent(parser.fmt, where).actor
                tx = stack.enter_context(_open(store, parser, path, report, session, actor,
                                               item))
            elif tx.source_seen(item.key) is not None:
                report.already += 1
                continue
            first = tx.emitted
            if item.apply is not None:
                try:
                    item.apply(tx)  # checks the call before it changes anything
                except InputError as exc:
                    report.calls -= 1
                    skip(Skipped(item.line, f"{item.tool}: {exc.message}", True))
                    continue
            elif item.write is not None:
                apply_write(tx, item.write, sees_response=False, ts=item.ts, ref=item.ref)
            tx.record_source(item.key)
            report.imported += 1
            report.events += tx.emitted - first
            report.saw(item.ts)
            if report.imported % FLUSH_EVERY == 0:
                tx.flush()


def _nul_free(call: Call) -> Call | Skipped:
    """The store keeps no NUL (PostgreSQL cannot): a call with one is skipped, not the file."""
    for i, it in enumerate(call.write.items if call.write is not None else ()):
        if "\x00" in it.content or "\x00" in (it.active_form or ""):
            return Skipped(call.line, f"{call.tool}: item {i} holds a NUL character", True)
    if any("\x00" in text for text in call.texts):
        return Skipped(call.line, f"{call.tool}: an argument holds a NUL character", True)
    return call


def _open(store: Store, parser: Any, path: Path, report: ImportReport, session: str | None,
          actor: str, first: Call) -> Any:
    name = session or session_name_for(parser.fmt, parser.info.session_hint, path)
    report.session = name
    row = store.session_by_name(name)
    if row is not None:
        return store.write(row.id, actor, heartbeat=False)
    report.session_created = True
    start = parser.info.first_ts or first.ts
    if start is not None and first.ts is not None and first.ts < start:
        start = first.ts
    return store.write_new(name, actor=actor, created_by=IMPORT_ACTOR, ts=start)


__all__ = ["IMPORT_ACTOR", "import_file", "session_name_for"]
