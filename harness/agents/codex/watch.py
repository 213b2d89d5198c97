"""``harness watch-codex DIR``: follow Codex CLI rollouts and ingest its plan updates.

Codex writes each session to ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``, one JSON
object a line: ``{timestamp, type, payload}``. A plan update is ``type: response_item``
with ``payload.type: function_call``, ``payload.name: update_plan`` and
``payload.arguments`` a JSON-encoded string ``{explanation?, plan: [{step, status}]}``.
(Older rollouts put the function call at the top level, without ``payload``; both are
read.) Each one is merged like any agent write, by ``agent:codex``, with
``sees_response=False`` (Codex never reads our answer), at the rollout's own timestamp and
with the call id as the event's ``ref``.

Restarts are safe: the byte offset reached in every file is kept, per store, in
``<data dir>/watch-codex.json`` and saved after every ingested call, and only complete
lines are read. The first time a store is watched, rollouts already there are skipped to
their end (they are history, not the current plan) unless ``backfill``; a file that
appears later, even while the watcher was down, is read from its start. A plan that
cannot be read is logged and skipped, never retried forever.

A call Codex refused is skipped, as the hooks skip it (Codex runs no ``PostToolUse`` for
it): its ``function_call_output`` (same ``call_id``) says so, e.g. "unsupported call:
update_plan" while ``[tools.update_plan]`` is not enabled
(:func:`refusal`; the importer reads rollouts alike). Codex writes that answer a moment after the
call, so a call without one waits, while the rollout is still growing, up to
:data:`HOLD_SECONDS`; the last pass of ``--once`` decides on what is there.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import formats
from harness.agents.logfile import log
from harness.agents.todolist import todowrite
from harness.context import Harness
from harness.errors import KNOWN_ERRORS, InputError
from harness.paths import data_dir
from state.store import normalize_ts

ACTOR = "agent:codex"
PATTERN = "rollout-*.jsonl"
HOLD_SECONDS = 2.0
_REFUSED = ("failed to parse", "error", "unsupported call")


def refusal(output: Any) -> str | None:
    """Why Codex refused a tool call, from its ``function_call_output``'s ``output``
    (None: the call went through, and changed the plan)."""
    text = output.get("content") if isinstance(output, dict) else output
    ok = output.get("success", True) if isinstance(output, dict) else True
    if ok is False or (isinstance(text, str) and text.lower().startswith(_REFUSED)):
        text = str(text)
        return text if len(text) <= 70 else text[:69] + "…"
    return None


@dataclass
class PlanCall:
    path: Path
    end: int  # byte offset just past the line
    call_id: str | None
    ts: str | None
    arguments: Any


def call_output(obj: Any) -> tuple[str, Any] | None:
    """(call id, output) if this rollout line is a tool call's answer."""
    if not isinstance(obj, Mapping):
        return None
    item = obj.get("payload") if obj.get("type") == "response_item" else obj
    if not isinstance(item, Mapping) or item.get("type") not in (
            "function_call_output", "custom_tool_call_output"):
        return None
    call_id = item.get("call_id")
    return (str(call_id), item.get("output")) if call_id else None


def plan_call(obj: Any) -> tuple[str | None, str | None, Any] | None:
    """(call id, timestamp, arguments) if this rollout line is an update_plan call."""
    if not isinstance(obj, Mapping):
        return None
    ts = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
    item = obj.get("payload") if obj.get("type") == "response_item" else obj
    if not isinstance(item, Mapping):
        return None
    if item.get("type") not in ("function_call", "custom_tool_call"):
        return None
    if item.get("name") != "update_plan":
        return None
    args = item.get("arguments", item.get("input"))
    call_id = item.get("call_id") or item.get("id")
    return (str(call_id) if call_id else None), ts, args


class OffsetBook:
    """Byte offsets per rollout file, for one store, kept in a small JSON file."""

    def __init__(self, path: Path, store_key: str):
        self.path = path
        self.key = store_key
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        self._all: dict[str, Any] = data if isinstance(data, dict) else {}
        mine = self._all.get(store_key)
        self.known = isinstance(mine, dict)
        self.offsets: dict[str, int] = {k: v for k, v in (mine or {}).items()
                                        if isinstance(v, int)}

    def get(self, path: Path) -> int | None:
        return self.offsets.get(str(path))

    def set(self, path: Path, offset: int) -> None:
        self.offsets[str(path)] = offset

    def save(self) -> None:
        self._all[self.key] = self.offsets
        self.known = True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".watch-codex-")
        with os.fdopen(fd, "w") as fh:
            json.dump(self._all, fh, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def offsets_path() -> Path:
    return data_dir() / "watch-codex.json"


class CodexWatcher:
    def __init__(self, harness: Harness, root: Path, *, actor: str = ACTOR,
                 backfill: bool = False, book: OffsetBook | None = None,
                 echo: Callable[[str], None] | None = None):
        self.harness = harness
        self.root = root
        self.actor = actor
        self.book = book or OffsetBook(offsets_path(), harness.store.url)
        self.echo = echo or (lambda _line: None)
        if not self.book.known and not backfill:
            skipped = 0
            for path in self._files():
                self.book.set(path, path.stat().st_size)
                skipped += 1
            self.book.save()
            if skipped:
                self.echo(f"skipped {skipped} existing rollout(s) to their end "
                          "(use --backfill to read them)")

    def _files(self) -> list[Path]:
        try:
            return sorted(p.resolve() for p in self.root.rglob(PATTERN) if p.is_file())
        except OSError:
            return []

    def _lines(self, path: Path, start: int) -> list[tuple[int, Any]]:
        """(offset just past the line, the parsed line or None) for every whole line
        after ``start``; a line Codex is still writing waits for the next pass."""
        out: list[tuple[int, Any]] = []
        with path.open("rb") as fh:
            fh.seek(start)
            offset = start
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break
                offset += len(raw)
                try:
                    out.append((offset, json.loads(raw)))
                except (ValueError, RecursionError):
                    out.append((offset, None))
        return out

    def scan(self, *, final: bool = False) -> int:
        """One pass over every rollout; returns how many plan calls were ingested.
        ``final``: a call still without Codex's answer is decided now, not held."""
        done = 0
        for path in self._files():
            try:
                size = path.stat().st_size
            except OSError:
                continue
            start = self.book.get(path)
            if start is None:
                start = 0
            elif start > size:
                start = 0  # the file was replaced by a shorter one: read it again
            if start == size:
                continue
            lines = self._lines(path, start)
            answers = dict(found for _end, obj in lines if (found := call_output(obj)))
            moved = False
            for end, obj in lines:
                found = plan_call(obj)
                if found is None:
                    self.book.set(path, end)
                    moved = True
                    continue
                call = PlanCall(path, end, *found)
                if call.call_id in answers:
                    refused = refusal(answers[call.call_id])
                elif not final and self._growing(path):
                    break  # its answer is on its way: the next pass decides
                else:
                    refused = None
                if refused is not None:
                    self._skip(call, f"refused by Codex ({refused})")
                elif self.ingest(call):
                    done += 1
                self.book.set(path, call.end)
                self.book.save()
                moved = False
            if moved:
                self.book.save()
        return done

    @staticmethod
    def _growing(path: Path) -> bool:
        try:
            return time.time() - path.stat().st_mtime < HOLD_SECONDS
        except OSError:
            return False

    def _skip(self, call: PlanCall, why: str) -> None:
        where = f"{call.path.name}:{call.call_id or call.end}"
        log("watch-codex", f"skipped {where}: {why}")
        self.echo(f"skipped {where}: {why}")

    def ingest(self, call: PlanCall) -> bool:
        where = f"{call.path.name}:{call.call_id or call.end}"
        try:
            args = call.arguments
            if isinstance(args, str):
                args = formats.loads(args, where)
            write = formats.parse(args, "codex", where)
            ts = normalize_ts(call.ts) if call.ts else None
            sid = self.harness.session(create=True).id
            result = todowrite(self.harness.store, sid, write, actor=self.actor,
                               sees_response=False, ts=ts, ref=call.call_id)
        except InputError as exc:  # a plan we cannot read: skip it, not retry it forever
            log("watch-codex", f"skipped {where}: {exc}")
            self.echo(f"skipped {where}: {exc}")
            return False
        self.echo(f"{where}: {len(write.items)} step(s), {result.events} event(s)")
        return True

    def run(self, interval: float = 1.0, *, passes: int | None = None) -> None:
        n = 0
        while passes is None or n < passes:
            try:
                self.scan(final=passes is not None and n == passes - 1)
            except KNOWN_ERRORS as exc:
                # The store is locked or gone for now: the offsets did not move past the
                # call, so the next pass tries it again.
                log("watch-codex", f"pass failed: {exc}")
                self.echo(f"error: {exc} (retrying)")
            n += 1
            if passes is None or n < passes:
                time.sleep(interval)
