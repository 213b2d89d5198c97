"""GitHub Copilot CLI, as the harness meets it (:class:`harness.agents.seam.Agent`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, ClassVar

from harness.agents.seam import Agent

if TYPE_CHECKING:
    from harness.agents.transcripts import Parser

_EVENT = re.compile(r"^[a-z_]+\.[a-z_.]+$")


class Copilot(Agent):
    name = "copilot"
    title = "GitHub Copilot CLI"
    program = "copilot"
    program_env = "HARNESS_COPILOT_BIN"
    todo_tools = ("sql",)  # on its session's todos and todo_deps tables
    notices = ("the next postToolUse or userPromptSubmitted hook's additionalContext; "
               "items by their id in its todos table")
    prime_note = ("With GitHub Copilot CLI's hooks installed (`harness hook copilot "
                  "install`), the todos table you keep with the sql tool is copied in after "
                  "each change, and the list comes back after a compaction.")
    hook_help = """A GitHub Copilot CLI hook: the hook's JSON payload on stdin, its event as
    --event.

    \b
    sessionStart                    recorded; the list is printed as additionalContext
    postToolUse sql                 the session's todos table (and todo_deps) is merged,
                                    when the query touched it
    postToolUse, userPromptSubmitted  what others changed since Copilot last saw the
                                    list, or the whole list after a compaction
    preCompact                      the compaction is recorded in the history

    `harness hook copilot install` writes these hooks into .github/hooks/.
    """
    hook_events = ("sessionStart", "userPromptSubmitted", "postToolUse", "preCompact",
                   "sessionEnd")
    install_help = """Write the harness hooks for GitHub Copilot CLI:
    .github/hooks/todo-harness.json (--project, the default; a file of its own) or `hooks`
    in $COPILOT_HOME/settings.json (--user, default ~/.copilot). Copilot CLI's model keeps
    its plan in its session's todos table (the sql tool), which the hooks read after each
    change. Running it again changes nothing. `uninstall` removes them."""
    formats: ClassVar[Mapping[str, str]] = {"copilot-events": "GitHub Copilot CLI session events, "
                                 "~/.copilot/session-state/ID/events.jsonl (its sql "
                                 "tool's writes to the todos table, replayed)"}
    setup = "harness.agents.copilot.setup"
    hooks = "harness.agents.copilot.hooks"
    session_prefix = "copilot"

    def sniff_line(self, obj: dict[str, Any]) -> str | None:
        kind, data = obj.get("type"), obj.get("data")
        if isinstance(kind, str) and _EVENT.match(kind) and isinstance(data, dict) \
                and "parentId" in obj:
            return "copilot-events"
        return None

    def transcript(self, fmt: str, fh: IO[bytes], where: str, fallback_ts: str) -> Parser:
        from harness.agents.copilot.transcript import CopilotEventsParser

        return CopilotEventsParser(fh, where, fallback_ts=fallback_ts)


AGENT = Copilot()
