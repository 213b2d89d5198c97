"""Which format a file is in, from its first bytes (never from its name)."""

from __future__ import annotations

import json
import re
from typing import Any

from harness.errors import InputError
from harness.export import is_export_header

FORMATS = ("claude-code", "claude-stream", "claude-action", "opencode-export",
           "opencode-json", "codex", "gemini-chat", "gemini-checkpoint", "harness")

# A GitHub Actions log of anthropics/claude-code-action: the step's header (with the
# runner's timestamp prefix, in a downloaded log), or the action's own first lines.
_ACTION = re.compile(r"^(?:\d{4}-\d\d-\d\dT[\d:.]+Z )?(?:##\[group\])?(?:Run anthropics/"
                     r"claude-code(?:-base)?-action\b|Running Claude (?:Code via SDK|with "
                     r"prompt from file))", re.M)
_CODEX_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
_CLAUDE_TYPES = {"summary", "file-history-snapshot", "user", "assistant", "system",
                 "queue-operation", "progress"}


def _first_values(head: bytes, limit: int = 20) -> list[Any]:
    out = []
    for raw in head.splitlines()[:limit]:
        raw = raw.strip()
        if not raw:
            continue
        try:
            out.append(json.loads(raw))
        except (ValueError, RecursionError):
            continue
    return out


def detect(head: bytes, where: str) -> str:
    """The format of a file that starts with ``head``; :class:`InputError` if unknown."""
    text = head.decode("utf-8", "replace")
    stripped = text.lstrip("\ufeff \t\r\n")
    if not stripped:
        raise InputError("empty file: nothing to import", where=where)
    if _ACTION.search(text):
        return "claude-action"
    if re.search(r"^\*\*Session ID:\*\*", text, re.M) or (
            stripped.startswith("#") and re.search(r"^## (User|Assistant)\b", text, re.M)):
        return "opencode-export"
    for obj in _first_values(head):
        if not isinstance(obj, dict):
            continue
        if is_export_header(obj):
            return "harness"
        kind = obj.get("type")
        if "sessionId" in obj and "projectHash" in obj:
            return "gemini-chat"  # before Claude Code's, whose lines carry a sessionId too
        if kind in _CODEX_TYPES and "payload" in obj:
            return "codex"
        if kind == "function_call" and obj.get("name"):
            return "codex"  # an older rollout: items without the wrapper
        if "sessionId" in obj or "parentUuid" in obj or (
                kind in ("summary", "file-history-snapshot")):
            return "claude-code"
        if "session_id" in obj and kind in _CLAUDE_TYPES | {"result"}:
            return "claude-stream"
        if "sessionID" in obj or (kind == "tool" and "callID" in obj):
            return "opencode-json"
        if "instructions" in obj and "id" in obj and "timestamp" in obj:
            return "codex"  # the first line of an older rollout
    if stripped.startswith(("{", "[")):
        # A pretty-printed document: look at its keys.
        if re.search(r'"projectHash"\s*:', text) and re.search(r'"messages"\s*:', text):
            return "gemini-chat"  # an older Gemini CLI's session-*.json
        if re.search(r'"messages"\s*:', text) and re.search(r'"info"\s*:', text):
            return "opencode-json"
        if re.search(r'"callID"\s*:', text) and re.search(r'"tool"\s*:', text):
            return "opencode-json"
        if re.search(r'"session_id"\s*:', text) and re.search(
                r'"type"\s*:\s*"(system|assistant|user|result)"', text):
            return "claude-stream"
        if re.search(r'"type"\s*:\s*"(assistant|user)"', text) and re.search(
                r'"content"\s*:', text):
            return "claude-stream"
        if re.search(r'"clientHistory"\s*:', text) or (
                re.search(r'"parts"\s*:', text)
                and re.search(r'"role"\s*:\s*"(model|user)"', text)):
            return "gemini-checkpoint"  # /chat save, or a tool call's checkpoint
    if b"\x00" in head:
        raise InputError("binary file (NUL bytes): not a transcript", where=where)
    first = stripped.splitlines()[0][:60] if stripped else ""
    raise InputError(f"unknown format (starts with {first!r}): not a Claude Code, opencode, "
                     "Codex, Gemini CLI or harness transcript", where=where,
                     hint="name it with --format (see `harness import --help`)")
