"""The tools an agent calls (through ``harness mcp``), apart from any transport.

Each tool is a :class:`ToolSpec`: a name, a description written for the model, a JSON
schema for its arguments, and a handler that takes plain JSON arguments and returns an
:class:`Answer` (a JSON-able dict, plus the text the model reads). Arguments are checked
against the schema (and the payload size limit) before the handler runs, and every
problem is a :class:`harness.errors.HarnessError` naming the argument, so the server can
hand it back as a tool error and carry on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.agents.tools.run_tools import (
    pipeline_status_tool,
    replay_tool,
    run_logs_tool,
    run_stage_tool,
    verification_results_tool,
)
from harness.agents.tools.spec import (
    DEFAULT_LOG_BYTES,
    DEFAULT_TAIL_LINES,
    MAX_LOG_BYTES,
    PRIORITY_ARG,
    RUN_ID_ARG,
    SESSION_ARG,
    TODO_ID_ARG,
    Answer,
    ToolEnv,
    ToolSpec,
    obj_schema,
)
from harness.agents.tools.todo_tools import (
    TODOWRITE_CHECK,
    TODOWRITE_SCHEMA,
    claim_next_tool,
    todo_update_tool,
    todoread_tool,
    todowrite_tool,
)
from harness.errors import UsageError
from state.fold import STATUSES

__all__ = ["TOOLS", "Answer", "ToolEnv", "ToolSpec", "call", "select_tools"]

# -- the catalogue -----------------------------------------------------------------------

TOOLS: dict[str, ToolSpec] = {t.name: t for t in [
    ToolSpec(
        "todowrite", "Write the todo list",
        "Save your todo list in the harness (a durable store shared with people and other "
        "agents). Send the WHOLE list each time, in opencode shape ({content, status, "
        "priority}) or Claude Code shape ({content, status, activeForm}). The harness "
        "merges it, it does not overwrite: a priority or status a person set survives when "
        "you resend the old value, items a person added are kept even if you leave them "
        "out, and a blocked item stays blocked until you move it to in_progress or "
        "completed. The answer is the resulting list in your own shape (people's items "
        "included), `ids` (the harness id of each item, for todo_update), and `notes` on "
        "what others changed since your last write. Read the notes.",
        TODOWRITE_SCHEMA, todowrite_tool, read_only=False, check_schema=TODOWRITE_CHECK),
    ToolSpec(
        "todoread", "Read the todo list",
        "The current todo list, including items people added and what is blocked and why. "
        "format: prompt (compact, default), json (every field), opencode or claude (your "
        "own shape, to resend with todowrite).",
        obj_schema({"format": {"type": "string", "enum": ["prompt", "json", "opencode", "claude"],
                         "default": "prompt"},
              "session": SESSION_ARG}), todoread_tool),
    ToolSpec(
        "todo_update", "Update one todo",
        "Change one item by id (\"t3\"): its status, its priority, or its blocked reason. "
        "Blocking needs a reason; a reason alone blocks the item; any other status clears "
        "the reason. Cheaper than resending the whole list.",
        obj_schema({"id": TODO_ID_ARG,
              "status": {"type": "string", "enum": list(STATUSES)},
              "priority": PRIORITY_ARG,
              "blocked_reason": {"type": "string", "minLength": 1,
                                 "description": "Why it is blocked, with the measured "
                                                "numbers if a check failed."},
              "session": SESSION_ARG}, ("id",)), todo_update_tool, read_only=False),
    ToolSpec(
        "claim_next", "Claim the next todo",
        "Take the highest-priority ready todo (pending, dependencies done, not a pipeline "
        "stage) and mark it in_progress as yours, atomically: agents working in parallel "
        "never get the same one. Answers with the todo, or why nothing is ready. With a "
        "`lease`, the todo goes back to pending if you make no call for that long; every "
        "call renews it.",
        obj_schema({"lease": {"type": ["string", "number"], "minLength": 1, "minimum": 0,
                        "description": "e.g. \"15m\"; \"none\": never expires. "
                                       "Default: the session's."},
              "session": SESSION_ARG}), claim_next_tool, read_only=False),
    ToolSpec(
        "pipeline_status", "Pipeline status",
        "Where the pipeline stands: each stage bound to a todo (status, what it waits on, "
        "why it is blocked, its last run with host, duration and exit code, and the last "
        "lines of that run's log), and the runs in flight.",
        obj_schema({"log_lines": {"type": "integer", "minimum": 0, "maximum": 200,
                            "default": DEFAULT_TAIL_LINES},
              "session": SESSION_ARG}), pipeline_status_tool),
    ToolSpec(
        "run_stage", "Start a pipeline stage",
        "Start one stage of the session's pipeline now, in the background, and get its run "
        "id at once (the stage's todo goes in_progress; its checks and gate decide whether "
        "it ends completed or blocked). The stage's dependencies must be completed. "
        "`pipeline` is the spec file; by default the one this session last ran.",
        obj_schema({"stage": {"type": "string", "minLength": 1},
              "pipeline": {"type": "string", "minLength": 1},
              "session": SESSION_ARG}, ("stage",)), run_stage_tool, read_only=False),
    ToolSpec(
        "run_logs", "Read a run's log",
        "A run's log from a byte offset. Call again with `next_offset` to follow it; "
        "`more` says whether more is stored already, `finished` whether the run has ended "
        "and you have read everything.",
        obj_schema({"run": RUN_ID_ARG,
              "offset": {"type": "integer", "minimum": 0, "default": 0},
              "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_BYTES,
                            "default": DEFAULT_LOG_BYTES}}, ("run",)), run_logs_tool),
    ToolSpec(
        "verification_results", "Verification results",
        "Verification results (checks that measure function, not just form: acceptance "
        "length, a benchmark's served speedup; a verify row's speedups are its reference "
        "loop's upper bounds, not served) for a todo, a run, or a checkpoint (a path "
        "fragment or sha256 prefix), newest last.",
        obj_schema({"todo": TODO_ID_ARG, "run": RUN_ID_ARG,
              "checkpoint": {"type": "string", "minLength": 1},
              "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
              "session": SESSION_ARG}), verification_results_tool),
    ToolSpec(
        "replay", "Replay the list",
        "The past of the todo list. `at`: the list as it was just after event N. `from` "
        "(and `to`, default now): what changed between two events, with the events "
        "themselves (who did what).",
        obj_schema({"at": {"type": "integer", "minimum": 0},
              "from": {"type": "integer", "minimum": 0},
              "to": {"type": "integer", "minimum": 0},
              "session": SESSION_ARG}), replay_tool),
]}


def select_tools(names: str | None) -> dict[str, ToolSpec]:
    """The tools ``harness mcp --tools a,b,c`` serves (None or empty: all of them)."""
    if not names or not names.strip():
        return dict(TOOLS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in TOOLS]
    if unknown:
        raise UsageError(f"unknown tool {unknown[0]!r} (known: {', '.join(TOOLS)})",
                         where="--tools")
    return {n: TOOLS[n] for n in TOOLS if n in wanted}


def call(env: ToolEnv, name: str, args: Mapping[str, Any] | None) -> Answer:
    spec = TOOLS.get(name)
    if spec is None:
        raise UsageError(f"unknown tool {name!r} (known: {', '.join(TOOLS)})")
    return spec.call(env, args)
