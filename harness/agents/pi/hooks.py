"""``harness hook pi --event EVENT --payload JSON``: what pi's extension asks the harness.

pi (``@mariozechner/pi-coding-agent``) has no todo tool and no MCP; the extension
``harness hook pi install`` writes (:mod:`harness.agents.pi.setup`, the TypeScript beside
this module) gives its model one, ``todowrite``, and runs this hook through ``pi.exec``,
which passes no standard input: the payload comes as ``--payload``, and the event as
``--event``:

* ``todowrite`` (``{todos, tool_call_id}``): the model's whole list, in the shape of our
  MCP tool (``{content, status, priority}``), merged like any agent write
  (:func:`harness.agents.todolist.todowrite`) with the tool call's id in ``ref``. The
  answer is the tool's result, which the model reads: what others changed (notes), then
  the whole list as the store has it, so it counts as seen.
* ``session_start`` (``{reason, entries, compaction}``; pi's reasons ``startup``, ``reload``, ``new``,
  ``resume``, ``fork``): the start of a context is an ``agent.context`` cut (``startup``
  of a session that has entries already is a ``resume``: ``pi -c``), and the list is owed
  to the model's next request (:func:`harness.agents.context_cuts.owe`). ``reload``
  keeps the context: nothing is cut.
* ``session_compact`` (``{compaction}``, its entry's id): a compaction is a cut, and the
  list is owed. ``pi -p`` lets its extensions go before it announces the compaction that
  ends its run; the next ``session_start`` says which compaction the session's branch
  ends with, and one not recorded yet is recorded then (:func:`compacted`).
* ``before_agent_start`` (each prompt) and ``tool_result`` (each other tool's result):
  the answer rides on the next request to the model, the first as a message beside the
  prompt, the second appended to the tool's result: the whole list when it is owed, else
  what others changed since the model last saw it (:mod:`harness.agents.notice`), each
  item named by its place in the model's last ``todowrite`` (``item 3``) and its text.

Every call is the agent's sign of life: its claims' leases are renewed.

The harness session: ``--session``, else ``HARNESS_SESSION``, else the project directory
(the payload's ``cwd``) (:func:`harness.agents.seam.project_session`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.agents.context_cuts import agent_views, owe, owed, record_cut, whole_list
from harness.agents.leases import renew
from harness.agents.notice import Labeler, positions
from harness.context import Harness
from harness.errors import InputError

ACTOR = "agent:pi"
EVENTS = ("todowrite", "session_start", "session_compact", "before_agent_start",
          "tool_result")
RESTORE_TAIL = ("Kept by todo-harness across compactions and restarts; your todowrite "
                "calls update it. Carry on from here.")
WRITTEN_TAIL = "Kept by todo-harness; send the whole list with todowrite when it changes."
# pi's session_start reasons -> the cut they are (None: the context goes on).
CUTS = {"startup": "startup", "new": "clear", "resume": "resume", "fork": "resume",
        "reload": None}


def handle(payload: Any, harness: Harness, *, event: str, actor: str = ACTOR) -> str | None:
    """Act on one event of the extension; what to print (None: nothing)."""
    if not isinstance(payload, Mapping):
        raise InputError(f"pi payload must be a JSON object, not {type(payload).__name__}")
    if event not in EVENTS:
        raise InputError(f"unknown event {event!r} (expected one of {', '.join(EVENTS)})"
                         if event else "no --event: the extension names each call's event")
    sid = harness.session(create=True).id
    renew(harness.store, sid, actor)  # any call is a sign of life
    ids = {"session_id": payload.get("session_id")}
    if event == "todowrite":
        return todowrite(harness, payload, actor)
    if event == "session_start":
        compacted(harness, payload, actor)
        reason = str(payload.get("reason") or "startup")
        cut = CUTS.get(reason, "startup")
        if cut == "startup" and isinstance(payload.get("entries"), int) \
                and payload["entries"] > 0:
            cut = "resume"  # `pi -c`: a session with history, in a new process
        if cut is not None:
            record_cut(harness, ids, cut, actor=actor)
            owe(harness, actor)
        return None
    if event == "session_compact":
        compacted(harness, payload, actor)
        return None
    return answer(harness, actor)


COMPACTIONS = "/compactions"  # an agent view: the last compaction recorded, per pi session


def compacted(harness: Harness, payload: Mapping[str, Any], actor: str) -> None:
    """A compaction (``session_compact``, or one the session's branch ends with at a
    start) not recorded yet is a cut, and the list is owed. ``pi -p`` lets its
    extensions go before it announces the compaction that ends a run: the next start
    finds it on the branch."""
    found = payload.get("compaction")
    session = str(payload.get("session_id") or "")
    if not isinstance(found, str) or not found:
        return
    sid = harness.session(create=True).id
    seen = harness.store.agent_view(sid, actor + COMPACTIONS)
    if isinstance(seen, dict) and seen.get(session) == found:
        return
    record_cut(harness, {"session_id": session}, "compact", actor=actor)
    with harness.store.write(sid, actor) as tx:
        tx.set_agent_view(actor + COMPACTIONS, {**(seen if isinstance(seen, dict) else {}),
                                                session: found})
    owe(harness, actor)


def answer(harness: Harness, actor: str) -> str | None:
    """The whole list when a cut owes it, else what others changed (None: nothing)."""
    if owed(harness, actor):
        return whole_list(harness, actor, RESTORE_TAIL)
    from harness.agents.notice import take

    notice = take(harness.store, harness.session(create=True).id, actor,
                  label=labels(harness, actor))
    return None if notice is None else notice.text()


def todowrite(harness: Harness, payload: Mapping[str, Any], actor: str) -> str:
    from harness import formats
    from harness.agents.todolist import todowrite as write_list

    write = formats.parse({"todos": payload.get("todos")}, "opencode", "pi todowrite")
    ref = payload.get("tool_call_id") if isinstance(payload.get("tool_call_id"), str) \
        else None
    result = write_list(harness.store, harness.session(create=True).id, write, actor=actor,
                        sees_response=True, ref=ref)
    block = whole_list(harness, actor, WRITTEN_TAIL) or "The todo list is empty."
    notes = [f"note: {line}" for line in result.notes]
    return "\n".join([*notes, block]) if notes else block


def labels(harness: Harness, actor: str = ACTOR) -> Labeler:
    """How the model knows a todo: its place in its last todowrite (``item 3``)."""
    return positions(agent_views(harness), actor, "item")
