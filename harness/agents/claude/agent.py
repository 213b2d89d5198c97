"""Claude Code, as the harness meets it (:class:`harness.agents.seam.Agent`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from harness.agents.seam import Agent, Link, Option

if TYPE_CHECKING:
    from harness.agents.transcripts import ImportReport, Parser
    from state.store import Store

# A GitHub Actions log of anthropics/claude-code-action: the step's header (with the
# runner's timestamp prefix, in a downloaded log), or the action's own first lines.
_ACTION = re.compile(r"^(?:\d{4}-\d\d-\d\dT[\d:.]+Z )?(?:##\[group\])?(?:Run anthropics/"
                     r"claude-code(?:-base)?-action\b|Running Claude (?:Code via SDK|with "
                     r"prompt from file))", re.M)
_TYPES = {"summary", "file-history-snapshot", "user", "assistant", "system",
          "queue-operation", "progress"}


class ClaudeCode(Agent):
    name = "claude-code"
    title = "Claude Code"
    program = "claude"
    program_env = "HARNESS_CLAUDE_BIN"
    todo_tools = ("TodoWrite", "TaskCreate", "TaskUpdate")
    notices = ("the next PostToolUse (a todo or task tool) or UserPromptSubmit hook's "
               "additionalContext, before the model's next turn; items as #N (its task) "
               "or item N (its place in the last TodoWrite)")
    prime_note = ("With Claude Code's hooks installed (`harness hook claude-code install`), "
                  "your TodoWrite and Task calls are copied in for you.")
    hook_help = """A Claude Code hook: give it the hook's JSON payload on stdin.

    \b
    PostToolUse TodoWrite           the whole list is merged into the session
    PostToolUse TaskCreate/Update   one item is created, changed or deleted
    TaskCreated, TaskCompleted      one item is created / completed
    PreCompact, PostCompact         the compaction is recorded in the history
    SessionStart                    the start (startup, resume, clear, compact) is
                                    recorded, and the list is printed as
                                    additionalContext: it comes back after every cut

    The session: --session, else CLAUDE_CODE_TASK_LIST_ID, else HARNESS_SESSION, else
    the project directory (its own store's current session, or one named after it).
    `harness hook claude-code install` writes these hooks into .claude/settings.json.
    """
    install_help = """Merge the harness hooks into .claude/settings.json (--project, the
    default) or ~/.claude/settings.json (--user), and let the model write todos there.

    \b
    In the same file: env CLAUDE_CODE_ENABLE_TODO_TOOLS=1 (Claude Code 2.1.233 and
    later give today's models no todo tools without it; --no-todo-tools leaves it off),
    the harness MCP server's todowrite and todoread allowed, and (--project) the
    server enabled. The server itself is registered as `harness mcp --agent
    claude-code` in .mcp.json (--project) or the user's .claude.json (--user).
    Other hooks and settings are kept; running it again changes nothing; --dry-run
    shows the diff. `uninstall` removes the hooks (the switch and the server stay)."""
    install_options = (
        Option("--no-todo-tools", "todo_tools", flag_value=False, default=True,
               help="Leave Claude Code's todo tools as they are (off on today's models): "
                    "the model then keeps its plan through the harness MCP server, which "
                    "is registered."),
        Option("--mcp", "mcp", default=False,
               help="Register the harness MCP server even with the todo tools on."),
    )
    formats: ClassVar[Mapping[str, str]] = {
        "claude-code": "Claude Code session JSONL (TodoWrite v1/v2, TaskCreate/TaskUpdate/"
                       "TaskList)",
        "claude-stream": "claude -p --output-format stream-json (also pretty-printed)",
        "claude-action": "a GitHub Actions log of anthropics/claude-code-action",
    }
    directory_help = ("a Claude Code task list, ~/.claude/tasks/LIST/ (one JSON file a "
                      "task; blockedBy/blocks become dependencies; --follow keeps it in sync)")
    setup = "harness.agents.claude.setup"
    hooks = "harness.agents.claude.hooks"
    session_prefix = "claude"

    @property
    def mcp_instructions(self) -> str:  # type: ignore[override]
        from harness.agents.claude.install import MCP_INSTRUCTIONS

        return MCP_INSTRUCTIONS

    def session_for(self, payload: Any, explicit: str | None = None) -> str | None:
        from harness.agents.claude.hooks import session_for

        return session_for(payload, explicit)

    def links(self, store: Store, session_id: int, num: int) -> list[Link]:
        from harness.agents.claude.task_files import task_of
        from harness.render import safe_line

        link = task_of(store, session_id, num)
        if link is None:
            return []
        return [Link("claude_task", {"list": link.list_id, "task": link.task_id,
                                     "file": str(link.path), "dropped": link.dropped},
                     f"claude code: task {safe_line(link.task_id)} of list "
                     f"{safe_line(link.list_id)}"
                     + (" (Claude Code dropped its file; kept here)" if link.dropped else ""))]

    # -- transcripts ----------------------------------------------------------------------

    def sniff_text(self, text: str) -> str | None:
        return "claude-action" if _ACTION.search(text) else None

    def sniff_line(self, obj: dict[str, Any]) -> str | None:
        kind = obj.get("type")
        if "projectHash" in obj:
            return None  # Gemini CLI's chats carry a sessionId too
        if "sessionId" in obj or "parentUuid" in obj or kind in ("summary",
                                                                 "file-history-snapshot"):
            return "claude-code"
        if "session_id" in obj and kind in _TYPES | {"result"}:
            return "claude-stream"
        return None

    def sniff_document(self, text: str) -> str | None:
        if re.search(r'"session_id"\s*:', text) and re.search(
                r'"type"\s*:\s*"(system|assistant|user|result)"', text):
            return "claude-stream"
        # Messages with content, in a document that is not an opencode export (its
        # `info`) nor an older Gemini CLI chat (its `projectHash`).
        if re.search(r'"type"\s*:\s*"(assistant|user)"', text) and re.search(
                r'"content"\s*:', text) and not re.search(r'"(info|projectHash)"\s*:', text):
            return "claude-stream"
        return None

    def transcript(self, fmt: str, fh: IO[bytes], where: str, fallback_ts: str) -> Parser:
        if fmt == "claude-action":
            from harness.agents.claude.action_log import ClaudeActionParser

            return ClaudeActionParser(fh, where, fallback_ts=fallback_ts)
        from harness.agents.claude.transcript import ClaudeParser

        return ClaudeParser(fh, where, stream=fmt == "claude-stream", fallback_ts=fallback_ts)

    def reads_directory(self, directory: Path) -> bool:
        from harness.agents.claude.task_list import is_task_list

        return is_task_list(directory)

    def import_directory(self, store: Store, directory: Path, *,
                         session: str | None) -> ImportReport:
        from harness.agents.claude.task_list import sync_task_list

        return sync_task_list(store, directory, session=session)

    def follow_directory(self, store: Store, directory: Path, *, session: str | None,
                         interval: float, echo: Callable[[ImportReport], None]) -> None:
        from harness.agents.claude.task_list import follow

        follow(store, directory, session=session, interval=interval, echo=echo)


AGENT = ClaudeCode()
