"""``harness hook opencode``: events from the opencode plugin in ``examples/opencode-plugin/``.

* ``todo.updated`` (the event, or its properties ``{sessionID, todos}``): the list is
  merged like any agent write, against what opencode sent (``sees_response`` is False:
  opencode never reads a plugin's answer).
* ``session.compacting`` (``{sessionID}``), sent by the plugin from opencode's
  ``experimental.session.compacting`` hook before it summarises a session: the cut is an
  ``agent.context`` event in the session's history, and the list is printed, which the
  plugin puts into the compaction's context, so the summary keeps it. That shows the
  whole list, so it counts as seen.
* ``tool.after`` (``{sessionID, tool}``), sent by the plugin from opencode's
  ``tool.execute.after`` hook once a tool has run: what others (a person, the runner)
  changed since opencode last saw the list (:mod:`harness.agents.notice`) is printed, and
  the plugin appends it to the tool's output, so the next request to the model carries
  it without waiting for a compaction. Nothing new: nothing is printed.
"""

from __future__ import annotations

from typing import Any

from harness import formats
from harness.agents.notice import Labeler
from harness.context import Harness
from harness.errors import InputError

ACTOR = "agent:opencode"
RESTORE_TAIL = ("Kept by todo-harness across compactions; keep it in the summary, and "
                "carry on with it (your todowrite calls update it).")


def handle(payload: Any, harness: Harness, *, actor: str = ACTOR) -> str | None:
    if not isinstance(payload, dict):
        raise InputError(f"opencode event must be a JSON object, not {type(payload).__name__}")
    kind = payload.get("type")
    props = payload.get("properties") if isinstance(payload.get("properties"), dict) \
        else payload
    if kind == "session.compacting":
        return compacting(harness, props, actor=actor)
    if kind == "tool.after":
        from harness.agents.leases import renew
        from harness.agents.notice import take

        sid = harness.session(create=True).id
        renew(harness.store, sid, actor)  # a tool call is a sign of life
        # Each item named by its place in opencode's last todowrite (``item 2``).
        notice = take(harness.store, sid, actor, label=labels(harness, actor))
        return notice.text() if notice is not None else None
    from harness.agents.todolist import todowrite

    write = formats.parse(props, "opencode", "opencode todo.updated")
    todowrite(harness.store, harness.session(create=True).id, write, actor=actor,
              sees_response=False)
    return None


def labels(harness: Harness, actor: str = ACTOR) -> Labeler:
    """How opencode knows a todo: its place in its last todowrite (``item 2``)."""
    from harness.agents.context_cuts import agent_views
    from harness.agents.notice import positions

    return positions(agent_views(harness), actor, "item")


def compacting(harness: Harness, props: dict[str, Any], *, actor: str = ACTOR) -> str | None:
    from harness.agents.context_cuts import record_cut, restore_block

    sid = props.get("sessionID")
    from harness.agents.notice import seen_now

    record_cut(harness, {"session_id": sid if isinstance(sid, str) else ""}, "compact",
               actor=actor)
    block = restore_block(harness, RESTORE_TAIL)
    if block is not None:
        seen_now(harness.store, harness.session(create=True).id, actor)
    return block
