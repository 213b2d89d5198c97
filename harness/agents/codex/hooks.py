"""``harness hook codex``: Codex CLI's hooks (``.codex/hooks.json``).

Codex's plan (``update_plan``) does not outlive a compaction. Its hooks give the places
to put it back:

* ``SessionStart`` (``source`` ``startup``, ``resume``, ``clear`` or ``compact``; Codex
  queues one with ``compact`` after every compaction): answers with the plan as
  ``hookSpecificOutput.additionalContext``, which Codex adds to the model's context.
* ``PreCompact`` / ``PostCompact`` (``trigger`` manual or auto): the cut becomes an
  ``agent.context`` event in the session's history. Codex accepts no context from these
  two (their output schema has none), so they print nothing.
* ``PostToolUse`` of ``update_plan`` (``tool_input`` ``{explanation?, plan}``): merged as
  ``agent:codex``, as ``harness watch-codex`` would merge it from the rollout (the same
  call from both changes the list once).
* A person's (or the runner's) change since Codex last saw the list rides on the next
  answer Codex reads: ``PostToolUse`` and ``UserPromptSubmit`` answer with it as
  ``hookSpecificOutput.additionalContext`` (:mod:`harness.agents.notice`), so it is in the
  next request to the model without waiting for a compaction. ``SessionStart`` shows the
  whole list, which counts as seen.

The harness session: ``--session``, else ``HARNESS_SESSION``, else the project directory
(the payload's ``cwd``), as for every agent (:func:`harness.agents.seam.project_session`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.agents.context_cuts import (
    CONTEXT_EVENTS,
    agent_views,
    context_event,
    notice_answer,
)
from harness.agents.notice import Labeler, positions
from harness.context import Harness
from harness.errors import InputError

ACTOR = "agent:codex"
RESTORE_TAIL = ("Kept by todo-harness across compactions and restarts; your update_plan "
                "calls update it. Carry on from here.")


def handle(payload: Any, harness: Harness, *, actor: str = ACTOR) -> str | None:
    if not isinstance(payload, Mapping):
        raise InputError(f"hook payload must be a JSON object, not {type(payload).__name__}")
    event = payload.get("hook_event_name")
    if event in CONTEXT_EVENTS:
        return context_event(harness, payload, actor=actor, tail=RESTORE_TAIL)
    if event == "UserPromptSubmit":
        return told(harness, event, actor)
    if event == "PostToolUse" and payload.get("tool_name") == "update_plan":
        from harness import formats
        from harness.agents.todolist import todowrite

        args = payload.get("tool_input")
        if isinstance(args, str):
            args = formats.loads(args, "update_plan tool_input")
        write = formats.parse(args, "codex", "update_plan tool_input")
        ref = payload.get("tool_use_id") if isinstance(payload.get("tool_use_id"), str) \
            else None
        todowrite(harness.store, harness.session(create=True).id, write, actor=actor,
                  sees_response=False, ref=ref)
    if event == "PostToolUse":
        return told(harness, event, actor)
    return None


def told(harness: Harness, event: str, actor: str) -> str | None:
    """The notice as ``event``'s answer, each item named as Codex knows it."""
    return notice_answer(harness, event, actor, labels(harness, actor))


def labels(harness: Harness, actor: str = ACTOR) -> Labeler:
    """How Codex knows a todo: its place in its last plan (``step 2``)."""
    return positions(agent_views(harness), actor, "step")
