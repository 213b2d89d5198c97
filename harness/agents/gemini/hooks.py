"""``harness hook gemini-cli``: Gemini CLI's hooks (``hooks`` in its ``settings.json``).

Gemini CLI runs a command hook with one JSON payload on stdin (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``, ``timestamp`` and the event's own
fields) and reads one JSON answer on stdout; ``hookSpecificOutput.additionalContext`` is
what it adds to the model's context, wrapped in ``<hook_context>`` (with ``<`` and ``>``
written as ``&lt;`` and ``&gt;``). Where it goes decides what each hook is for:

* ``SessionStart`` (``source`` ``startup``, ``resume``, ``clear``): the start is an
  ``agent.context`` cut in the history, and the answer is the whole list, which Gemini CLI
  puts before the first prompt (``clear`` ignores any context: the list is then owed to
  the next prompt).
* ``AfterTool`` (every tool): a ``write_todos`` call (Gemini 2 models) is merged as a
  whole list, like any agent write; a tracker call (``tracker_*``, with
  ``experimental.taskTracker``) changes one task (:mod:`harness.agents.gemini.tracker`).
  The answer rides on the tool's result, in the next request to the model: what others
  changed since the model last saw the list (:mod:`harness.agents.notice`), or the whole
  list when Gemini CLI is about to compress its chat
  (:func:`harness.agents.gemini.compress.compression_due`) or a list is owed.
* ``BeforeAgent`` (each prompt): the same answer, on the prompt.
* ``PreCompress`` (``trigger`` ``manual`` for ``/compress``, ``auto`` before every
  request): a compression that will happen is a cut in the history; Gemini CLI ignores
  this hook's answer, so after ``/compress`` the list is owed to the next prompt.

A write that Gemini CLI refused (a tool error) changed nothing, and is skipped.

The harness session: ``--session``, else ``HARNESS_SESSION``, else the project directory
(the payload's ``cwd``), as for Codex (:func:`harness.agents.seam.project_session`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.agents.context_cuts import additional_context as _additional_context
from harness.agents.context_cuts import agent_views, owe, owed, record_cut
from harness.agents.context_cuts import whole_list as _whole_list
from harness.agents.notice import Labeler
from harness.context import Harness
from harness.errors import InputError

ACTOR = "agent:gemini-cli"
RESTORE_TAIL = ("Kept by todo-harness across compressions, clears and restarts; your "
                "tracker and write_todos calls update it. Carry on from here.")
WRITE_TODOS = "write_todos"
SESSION_SOURCES = ("startup", "resume", "clear")


def handle(payload: Any, harness: Harness, *, actor: str = ACTOR) -> str | None:
    """Act on one hook payload; return what to print on stdout (None: nothing)."""
    if not isinstance(payload, Mapping):
        raise InputError(f"hook payload must be a JSON object, not {type(payload).__name__}")
    event = payload.get("hook_event_name")
    if event == "SessionStart":
        return session_start(harness, payload, actor)
    if event == "PreCompress":
        pre_compress(harness, payload, actor)
        return None
    if event == "BeforeAgent":
        return context_answer(harness, payload, str(event), actor)
    if event != "AfterTool":
        return None
    tool = payload.get("tool_name")
    if tool == WRITE_TODOS or (isinstance(tool, str) and tool.startswith("tracker_")):
        after_todo_tool(harness, payload, str(tool), actor)
    return context_answer(harness, payload, str(event), actor)


# -- the list in and out --------------------------------------------------------------------

# Gemini CLI writes < and > in a hook's context as &lt; and &gt;: our own arrows and the
# in-progress mark are given in characters it leaves alone.
def additional_context(event: str, text: str) -> str:
    return _additional_context(event, text.replace(" -> ", " \u2192 ")
                               .replace("[>]", "[\u2192]"))


def session_start(harness: Harness, payload: Mapping[str, Any], actor: str) -> str | None:
    source = payload.get("source")
    if source in SESSION_SOURCES:
        record_cut(harness, payload, str(source), actor=actor)
    if source == "clear":
        owe(harness, actor)  # Gemini CLI drops SessionStart's context on /clear
        return None
    return whole_list(harness, "SessionStart", actor)


def pre_compress(harness: Harness, payload: Mapping[str, Any], actor: str) -> None:
    from harness.agents.gemini.compress import compression_due

    manual = payload.get("trigger") == "manual"
    if not (manual or compression_due(payload)):
        return  # the usual case: a check before every request that compresses nothing
    record_cut(harness, payload, "compact", actor=actor, phase="PreCompress")
    if manual:
        # An automatic one was foreseen by the step before it, which sent the list out on
        # the request the compression precedes; /compress was not.
        owe(harness, actor)


def whole_list(harness: Harness, event: str, actor: str) -> str | None:
    """The list as the answer to ``event``; everything up to now counts as seen."""
    block = _whole_list(harness, actor, RESTORE_TAIL)
    return None if block is None else additional_context(event, block)


def context_answer(harness: Harness, payload: Mapping[str, Any], event: str,
                   actor: str) -> str | None:
    """The answer of a hook whose context reaches the next request: the whole list when
    it is owed or a compression is due, else what others changed (None: nothing new)."""
    from harness.agents.gemini.compress import compression_due
    from harness.agents.notice import take

    if owed(harness, actor) or compression_due(payload):
        return whole_list(harness, event, actor)
    notice = take(harness.store, harness.session(create=True).id, actor,
                  label=labels(harness, actor))
    return None if notice is None else additional_context(event, notice.text())


def labels(harness: Harness, actor: str = ACTOR) -> Labeler:
    """How the model knows a todo: ``task 929ca3``, its tracker task, else ``item 2``, its
    place in the last ``write_todos`` list."""
    from harness.agents.claude.tasks import task_labels
    from harness.agents.gemini.tracker import TRACKER_VIEW

    return task_labels(agent_views(harness), actor, view_key=TRACKER_VIEW, prefix="task ")


# -- the agent's own writes -----------------------------------------------------------------

def _result_text(response: Any) -> tuple[str, bool]:
    """(what the tool told the model, whether the tool failed) from ``tool_response``."""
    if not isinstance(response, Mapping):
        return (response if isinstance(response, str) else ""), False
    failed = bool(response.get("error"))
    content = response.get("llmContent")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return (content if isinstance(content, str) else ""), failed


def after_todo_tool(harness: Harness, payload: Mapping[str, Any], tool: str,
                    actor: str) -> None:
    args = payload.get("tool_input")
    if not isinstance(args, Mapping):
        raise InputError(f"{tool}: tool_input must be an object")
    text, failed = _result_text(payload.get("tool_response"))
    if failed:
        return  # Gemini CLI refused the call: its list did not change
    sid = harness.session(create=True).id
    if tool == WRITE_TODOS:
        from harness import formats
        from harness.agents.todolist import todowrite

        write = formats.parse(dict(args), "gemini", where="write_todos tool_input")
        todowrite(harness.store, sid, write, actor=actor, sees_response=False)
        return
    from harness.agents.gemini.tracker import apply

    with harness.store.write(sid, actor) as tx:
        apply(tx, tool, args, text, str(payload.get("session_id") or ""))
