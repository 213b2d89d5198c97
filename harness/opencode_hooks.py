"""``harness hook opencode``: opencode's ``todo.updated`` event, from the plugin in
``examples/opencode-plugin/`` (the event, or its properties ``{sessionID, todos}``).

The list is merged like any agent write, against what opencode sent (``sees_response``
is False: opencode never reads a plugin's answer). The plugin also asks for the list when
opencode compacts a session (``experimental.session.compacting``): that is
``harness todoread --format prompt``, put into the compaction's context.
"""

from __future__ import annotations

from typing import Any

from harness import formats
from harness.agent import todowrite
from harness.context import Harness

ACTOR = "agent:opencode"


def handle(payload: Any, harness: Harness, *, actor: str = ACTOR) -> str | None:
    if isinstance(payload, dict) and isinstance(payload.get("properties"), dict):
        payload = payload["properties"]  # the whole event, not just its properties
    write = formats.parse(payload, "opencode", "opencode todo.updated")
    todowrite(harness.store, harness.session(create=True).id, write, actor=actor,
              sees_response=False)
    return None
