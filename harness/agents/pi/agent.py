"""pi (``@mariozechner/pi-coding-agent``), as the harness meets it
(:class:`harness.agents.seam.Agent`).

pi has four tools (read, write, edit, bash), no todo tool, and no MCP by design: the
harness gives its model one through an extension (:mod:`harness.agents.pi.setup` writes
it; :mod:`harness.agents.pi.hooks` answers it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, ClassVar

from harness.agents.seam import Agent

if TYPE_CHECKING:
    from harness.agents.transcripts import Parser


class Pi(Agent):
    name = "pi"
    title = "pi"
    program = "pi"
    program_env = "HARNESS_PI_BIN"
    todo_tools = ("todowrite",)  # the harness's extension gives it
    notices = ("the extension appends it to the next tool's result, or puts it beside the "
               "next prompt (before_agent_start); items as item N (their place in the last "
               "todowrite)")
    prime_note = ("With the harness's pi extension (`harness hook pi install`), you have a "
                  "todowrite tool that keeps this list; use it instead of the commands "
                  "above.")
    hook_help = """What the harness's pi extension asks (`harness hook pi install` writes
    it): the event as --event, its JSON payload as --payload (pi.exec gives a command no
    standard input), else on stdin.

    \b
    todowrite                       the model's whole list is merged; the answer (notes,
                                    then the list) is the tool's result
    session_start                   recorded (a resume with `pi -c`); the list is owed
    session_compact                 the compaction is recorded; the list is owed
    before_agent_start, tool_result the list when owed, else what others changed since
                                    pi last saw it: beside the prompt, or on the result
    """
    hook_events = ("todowrite", "session_start", "session_compact", "before_agent_start",
                   "tool_result")
    hook_payload_arg = True
    install_help = """Write the harness's extension for pi: .pi/extensions/todo-harness.ts
    (--project, the default) or ~/.pi/agent/extensions/todo-harness.ts (--user;
    $PI_CODING_AGENT_DIR/extensions). pi has no todo tool of its own: the extension gives
    its model `todowrite` ({todos: [{content, status, priority}]}), backed by this harness,
    gives the list back after a compaction or a restart, and tells the model what a person
    changed. Running it again changes nothing; `uninstall` removes the file."""
    formats: ClassVar[Mapping[str, str]] = {"pi-session": "a pi session, ~/.pi/agent/sessions/--CWD--/*.jsonl (the "
                             "extension's todowrite calls)"}
    setup = "harness.agents.pi.setup"
    hooks = "harness.agents.pi.hooks"
    session_prefix = "pi"

    def sniff_line(self, obj: dict[str, Any]) -> str | None:
        kind = obj.get("type")
        if kind == "session" and "version" in obj and "cwd" in obj:
            return "pi-session"
        if kind == "message" and "parentId" in obj and isinstance(obj.get("message"), dict):
            return "pi-session"
        return None

    def transcript(self, fmt: str, fh: IO[bytes], where: str, fallback_ts: str) -> Parser:
        from harness.agents.pi.transcript import PiSessionParser

        return PiSessionParser(fh, where, fallback_ts=fallback_ts)


AGENT = Pi()
