"""Gemini CLI, as the harness meets it (:class:`harness.agents.seam.Agent`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, ClassVar

from harness.agents.seam import Agent, OpenHarness, Option

if TYPE_CHECKING:
    from harness.agents.transcripts import Parser


class GeminiCli(Agent):
    name = "gemini-cli"
    title = "Gemini CLI"
    program = "gemini"
    program_env = "HARNESS_GEMINI_BIN"
    todo_tools = ("tracker_create_task", "tracker_update_task", "write_todos")
    notices = ("the next AfterTool or BeforeAgent hook's additionalContext; items as task "
               "ID (its tracker task) or item N (its place in the last write_todos)")
    prime_note = ("With Gemini CLI's hooks installed (`harness hook gemini-cli install`), "
                  "your task tracker and write_todos calls are copied in and the list "
                  "comes back after a compression.")
    hook_help = """A Gemini CLI hook (settings.json `hooks`): the hook's JSON payload on stdin.

    \b
    SessionStart                    recorded; the list is printed as additionalContext
    AfterTool write_todos           the whole list is merged (Gemini 2 models)
    AfterTool tracker_*             one task is created, changed or linked (the task
                                    tracker, with experimental.taskTracker)
    AfterTool (any), BeforeAgent    what others changed since Gemini last saw the list,
                                    or the whole list when a compression is due
    PreCompress                     a compression is recorded in the history

    `harness hook gemini-cli install` writes these hooks into .gemini/settings.json.
    """
    install_help = """Merge the harness hooks into .gemini/settings.json (--project, the
    default) or ~/.gemini/settings.json (--user; $GEMINI_CLI_HOME/.gemini), and turn on
    Gemini CLI's task tracker (experimental.taskTracker), which gives its current models
    task tools: Gemini 3 models have no todo tool otherwise. Other hooks and settings are
    kept; running it again changes nothing. Prints what it turned on, and what is left to
    you, such as trusting the folder. `uninstall` removes the hooks (the tracker stays)."""
    install_options = (
        Option("--no-task-tools", "task_tools", flag_value=False, default=True,
               help="Leave Gemini CLI's task tracker off (experimental.taskTracker); a model "
                    "without write_todos then gets the harness MCP server instead."),
    )
    formats: ClassVar[Mapping[str, str]] = {
        "gemini-chat": "a Gemini CLI saved chat, ~/.gemini/tmp/PROJECT/chats/session-*.jsonl "
                       "(or an older session-*.json): write_todos, the task tracker's calls",
        "gemini-checkpoint": "a Gemini CLI checkpoint (/chat save: checkpoint-TAG.json; or "
                             "checkpoints/*.json)",
    }
    setup = "harness.agents.gemini.setup"
    hooks = "harness.agents.gemini.hooks"
    session_prefix = "gemini"

    def hook(self, payload: Any, open_harness: OpenHarness, *, actor: str,
             event: str | None = None) -> str | None:
        if isinstance(payload, Mapping) and payload.get("hook_event_name") == "PreCompress":
            # Before every request to the model: mostly nothing to do, and that is
            # decided from the transcript alone, without the store.
            from harness.agents.gemini.compress import compression_due

            if payload.get("trigger") != "manual" and not compression_due(payload):
                return None
        return super().hook(payload, open_harness, actor=actor, event=event)

    def sniff_line(self, obj: dict[str, Any]) -> str | None:
        return "gemini-chat" if "sessionId" in obj and "projectHash" in obj else None

    def sniff_document(self, text: str) -> str | None:
        if re.search(r'"projectHash"\s*:', text) and re.search(r'"messages"\s*:', text):
            return "gemini-chat"  # an older Gemini CLI's session-*.json
        if re.search(r'"clientHistory"\s*:', text) or (
                re.search(r'"parts"\s*:', text)
                and re.search(r'"role"\s*:\s*"(model|user)"', text)
                and not re.search(r'"info"\s*:', text)):
            return "gemini-checkpoint"  # /chat save, or a tool call's checkpoint
        return None

    def transcript(self, fmt: str, fh: IO[bytes], where: str, fallback_ts: str) -> Parser:
        from harness.agents.gemini.transcript import GeminiChatParser, GeminiCheckpointParser

        cls = GeminiChatParser if fmt == "gemini-chat" else GeminiCheckpointParser
        return cls(fh, where, fallback_ts=fallback_ts)


AGENT = GeminiCli()
