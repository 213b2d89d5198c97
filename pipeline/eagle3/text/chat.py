"""Prompt shapes, reasoning reassembly and think-tag checks. Standard library only.

Prompt files are JSONL, one object a line, in one of three documented shapes:

- ``{"id"?: str, "messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}``
  (OpenAI chat; the last message must be the user's);
- ``{"id"?: str, "prompt": str, "system"?: str}`` (one user turn);
- ``{"id"?: str, "conversations": [{"from": "system"|"human"|"gpt", "value": str}, ...]}``
  (ShareGPT; turns after the last human turn are dropped, the answer is regenerated).

Anything else is refused with the file and line. A missing ``id`` becomes a hash of the
messages, so resuming a run matches the same prompts again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.errors import ActionError

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                   "assistant": "assistant"}


@dataclass
class Prompt:
    id: str
    messages: list[dict[str, str]]


def messages_id(messages: list[dict[str, str]]) -> str:
    blob = json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()
    return "p-" + hashlib.sha256(blob).hexdigest()[:16]


def parse_prompt(obj: Any, where: str) -> Prompt:
    """One prompt line in any documented shape -> :class:`Prompt`; else an ActionError."""
    if not isinstance(obj, dict):
        raise ActionError(f"a prompt must be a JSON object, got {type(obj).__name__}",
                          where=where)
    if "messages" in obj:
        messages = _check_messages(obj["messages"], where)
    elif "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
            raise ActionError("'prompt' must be a non-empty string", where=where)
        messages = []
        if isinstance(obj.get("system"), str):
            messages.append({"role": "system", "content": obj["system"]})
        messages.append({"role": "user", "content": obj["prompt"]})
    elif "conversations" in obj:
        messages = _sharegpt(obj["conversations"], where)
    else:
        keys = ", ".join(sorted(map(str, obj))) or "none"
        raise ActionError(f"unknown prompt shape (keys: {keys}); expected 'messages', "
                          "'prompt' or 'conversations'", where=where)
    pid = obj.get("id")
    if pid is None:
        pid = messages_id(messages)
    elif not isinstance(pid, (str, int)):
        raise ActionError("'id' must be a string or an integer", where=where)
    return Prompt(id=str(pid), messages=messages)


def _check_messages(messages: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise ActionError("'messages' must be a non-empty list", where=where)
    out = []
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str)):
            raise ActionError(f"messages[{i}] needs string 'role' and 'content'", where=where)
        if m["role"] not in ("system", "user", "assistant"):
            raise ActionError(f"messages[{i}] has unknown role {m['role']!r}", where=where)
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise ActionError("the last message must be the user's (the answer is generated)",
                          where=where)
    return out


def _sharegpt(turns: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(turns, list) or not turns:
        raise ActionError("'conversations' must be a non-empty list", where=where)
    messages = []
    for i, t in enumerate(turns):
        if not (isinstance(t, dict) and isinstance(t.get("value"), str)
                and t.get("from") in _SHAREGPT_ROLES):
            raise ActionError(f"conversations[{i}] needs 'from' (system/human/gpt) and "
                              "string 'value'", where=where)
        messages.append({"role": _SHAREGPT_ROLES[t["from"]], "content": t["value"]})
    while messages and messages[-1]["role"] != "user":
        messages.pop()
    if not messages:
        raise ActionError("'conversations' has no human turn", where=where)
    return messages


def reasoning_of(message: Mapping[str, Any]) -> str | None:
    """The reasoning an OpenAI-compatible server returned apart from the content, if any.

    vLLM's reasoning parsers call it ``reasoning_content`` (older) or ``reasoning`` (newer).
    """
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return None


@dataclass
class Assembled:
    text: str
    has_reasoning: bool
    restored_open_tag: bool = False


def assemble(content: str | None, reasoning: str | None) -> Assembled:
    """Put the reasoning back as the model generated it: ``<think>`` reasoning ``</think>`` answer.

    The parts are joined without touching whitespace: the parser split the text at the tags,
    so concatenation restores it. Two other cases the seed met:

    - no parser, reasoning left inline in ``content``: kept as it is;
    - the chat template opened ``<think>`` itself (DeepSeek-R1 style), so the output starts
      inside the block and only ``</think>`` appears: the opening tag is put back, or the
      training text would teach the drafter an unbalanced block.
    """
    content = content or ""
    if reasoning:
        return Assembled(THINK_OPEN + reasoning + THINK_CLOSE + content, True)
    if THINK_OPEN in content:
        return Assembled(content, True)
    if THINK_CLOSE in content:
        return Assembled(THINK_OPEN + content, True, restored_open_tag=True)
    return Assembled(content, False)


def think_problem(text: str) -> str | None:
    """Why ``text``'s think tags are malformed, or None when they are fine (or absent).

    Allowed: no tags, or exactly one ``<think>`` at the start (after whitespace) closed by
    one ``</think>``.
    """
    opens, closes = text.count(THINK_OPEN), text.count(THINK_CLOSE)
    if opens == 0 and closes == 0:
        return None
    if opens != closes:
        return f"{opens} {THINK_OPEN} vs {closes} {THINK_CLOSE}"
    if opens > 1:
        return f"{opens} think blocks"
    if text.index(THINK_CLOSE) < text.index(THINK_OPEN):
        return f"{THINK_CLOSE} before {THINK_OPEN}"
    if text[: text.index(THINK_OPEN)].strip():
        return f"text before {THINK_OPEN}"
    return None


def split_think(text: str) -> tuple[str, str]:
    """``(reasoning, answer)`` of a well-formed text; reasoning is '' when there is none."""
    if THINK_OPEN in text and THINK_CLOSE in text:
        start = text.index(THINK_OPEN) + len(THINK_OPEN)
        end = text.index(THINK_CLOSE)
        return text[start:end], text[end + len(THINK_CLOSE):]
    return "", text
