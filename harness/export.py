"""``harness export``: a session's events as JSONL, which ``harness import`` reads back.

The file is one JSON object a line, keys sorted, no spaces, so the same session always
gives the same bytes:

* first a header: ``{"type": "session", "format": "todo-harness/events", "version": 1,
  "name", "created_at", "pipeline", "parent", "fork_n", "events"}``;
* then each event in order: ``{"type": "event", "n", "ts", "actor", "kind", "todo_id",
  "payload", "ref"}`` (no ``seq``: that numbers one store's whole log);
* then each agent's view (the base of its next merge): ``{"type": "agent_view",
  "actor", "view", "updated_at"}``, so an agent can carry on in the imported copy.

Export, import, export gives the same bytes apart from ids: the session's name and id
in ``session.created``, and store-wide run, verification and artifact ids, which the
importer renumbers. Run logs are data, not events, and stay behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from harness.errors import NoSession
from state.store import Store
from state.values import dumps

EXPORT_FORMAT = "todo-harness/events"
EXPORT_VERSION = 1
FORMATS = ("jsonl",)


def export_lines(store: Store, session_id: int) -> Iterator[str]:
    """The export of one session, a line at a time (streams a session of any size)."""
    sess = store.session_by_id(session_id)
    if sess is None:
        raise NoSession(f"no session with id {session_id}", where=store.where)
    parent = store.session_by_id(sess.parent_id) if sess.parent_id is not None else None
    header: dict[str, Any] = {
        "type": "session", "format": EXPORT_FORMAT, "version": EXPORT_VERSION,
        "name": sess.name, "created_at": sess.created_at, "pipeline": sess.pipeline,
        "parent": parent.name if parent is not None else None, "fork_n": sess.fork_n,
        "events": store.last_n(session_id),
    }
    yield dumps(header)
    for ev in store.iter_events(session_id):
        yield dumps({"type": "event", "n": ev.n, "ts": ev.ts, "actor": ev.actor,
                     "kind": ev.kind, "todo_id": ev.todo_id, "payload": ev.payload,
                     "ref": ev.ref})
    for actor, view, updated_at in store.agent_views(session_id):
        yield dumps({"type": "agent_view", "actor": actor, "view": json.loads(view),
                     "updated_at": updated_at})


def export_session(store: Store, session_id: int, out: TextIO) -> int:
    """Write the export to ``out``; returns the number of lines."""
    count = 0
    for line in export_lines(store, session_id):
        out.write(line)
        out.write("\n")
        count += 1
    return count


def is_export_header(obj: Any) -> bool:
    return (isinstance(obj, dict) and obj.get("type") == "session"
            and obj.get("format") == EXPORT_FORMAT)


__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "export_lines", "export_session",
           "is_export_header"]
