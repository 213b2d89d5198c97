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
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import formats
from harness.agent import todowrite
from harness.context import Harness
from harness.errors import KNOWN_ERRORS, InputError
from harness.logfile import log
from harness.paths import data_dir
from state.store import normalize_ts

ACTOR = "agent:codex"
PATTERN = "rollout-*.jsonl"


@dataclass
class PlanCall:
    path: Path
    end: int  # byte offset just past the line
    call_id: str | None
    ts: str | None
    arguments: Any


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

    def _calls(self, path: Path, start: int) -> Iterator[PlanCall | int]:
        """Plan calls after ``start``; a bare int is the offset after a line without one."""
        with path.open("rb") as fh:
            fh.seek(start)
            offset = start
            for raw in fh:
                if not raw.endswith(b"\n"):
                    return  # a line Codex is still writing: next time
                offset += len(raw)
                try:
                    found = plan_call(json.loads(raw))
                except (ValueError, RecursionError):
                    found = None
                if found is None:
                    yield offset
                else:
                    yield PlanCall(path, offset, *found)

    def scan(self) -> int:
        """One pass over every rollout; returns how many plan calls were ingested."""
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
            moved = False
            for item in self._calls(path, start):
                if isinstance(item, int):
                    self.book.set(path, item)
                    moved = True
                    continue
                if self.ingest(item):
                    done += 1
                self.book.set(path, item.end)
                self.book.save()
                moved = False
            if moved:
                self.book.save()
        return done

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
                self.scan()
            except KNOWN_ERRORS as exc:
                # The store is locked or gone for now: the offsets did not move past the
                # call, so the next pass tries it again.
                log("watch-codex", f"pass failed: {exc}")
                self.echo(f"error: {exc} (retrying)")
            n += 1
            if passes is None or n < passes:
                time.sleep(interval)
