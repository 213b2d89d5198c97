"""Codex CLI, as the harness meets it (:class:`harness.agents.seam.Agent`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from harness.agents.seam import Agent, Option

if TYPE_CHECKING:
    from harness.agents.transcripts import Parser
    from harness.context import Harness

_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}


class Codex(Agent):
    name = "codex"
    title = "Codex"
    program = "codex"
    program_env = "HARNESS_CODEX_BIN"
    todo_tools = ("update_plan",)
    notices = ("the next PostToolUse or UserPromptSubmit hook's additionalContext; items "
               "as step N (their place in the last update_plan)")
    prime_note = ("With the Codex hooks installed (`harness hook codex install`), your "
                  "update_plan calls are copied in and the plan comes back after compaction.")
    hook_help = """A Codex CLI hook (.codex/hooks.json): the hook's JSON payload on stdin.

    \b
    SessionStart                    recorded; the plan is printed as additionalContext
                                    (Codex sends source=compact after every compaction)
    PreCompact, PostCompact         the compaction is recorded in the history
    PostToolUse update_plan         the plan is merged (as watch-codex would)

    `harness hook codex install` writes these hooks into .codex/hooks.json.
    """
    install_help = """Merge the harness hooks into .codex/hooks.json (--project, the
    default) or $CODEX_HOME/hooks.json (--user, default ~/.codex), and set in
    $CODEX_HOME/config.toml what Codex needs to run them: `[tools.update_plan] enabled =
    true`, and the hooks trusted (their hash asked of Codex itself). Other hooks and
    settings are kept; running it again changes nothing. Prints what is left to you, such
    as trusting the project. `uninstall` removes the hooks (config.toml stays)."""
    install_options = (
        Option("--codex", "codex", flag_value=None, metavar="PATH",
               help="The Codex program that hashes the hooks for trust (default: codex on "
                    "PATH, or $HARNESS_CODEX_BIN)."),
    )
    formats: ClassVar[Mapping[str, str]] = {"codex": "Codex CLI rollout JSONL (update_plan)"}
    setup = "harness.agents.codex.setup"
    hooks = "harness.agents.codex.hooks"
    session_prefix = "codex"

    def sniff_line(self, obj: dict[str, Any]) -> str | None:
        kind = obj.get("type")
        if kind in _TYPES and "payload" in obj:
            return "codex"
        if kind == "function_call" and obj.get("name"):
            return "codex"  # an older rollout: items without the wrapper
        if "instructions" in obj and "id" in obj and "timestamp" in obj:
            return "codex"  # the first line of an older rollout
        return None

    def transcript(self, fmt: str, fh: IO[bytes], where: str, fallback_ts: str) -> Parser:
        from harness.agents.codex.transcript import CodexParser

        return CodexParser(fh, where, fallback_ts=fallback_ts)

    def watch_dir(self) -> Path | None:
        from harness.paths import codex_home

        return codex_home() / "sessions"

    def watch(self, harness: Harness, root: Path, *, actor: str, backfill: bool,
              echo: Callable[[str], None], interval: float, passes: int | None,
              started: Callable[[], None]) -> None:
        from harness.agents.codex.watch import CodexWatcher

        watcher = CodexWatcher(harness, root, actor=actor, backfill=backfill, echo=echo)
        started()
        watcher.run(interval, passes=passes)


AGENT = Codex()
