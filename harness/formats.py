"""Agent todo payloads: detect, parse and validate them, and render lists back.

The shapes (as the agents send them; real samples are in tests/data/):

=================  ===========================================  ==============================
format             item fields                                  statuses
=================  ===========================================  ==============================
opencode           content, status, priority (+ id, older)      pending in_progress completed
                                                                cancelled
claude (v1)        id, content, status, priority                pending in_progress completed
claude (v2)        content, status, activeForm                  pending in_progress completed
codex              step, status (``update_plan {plan:[...]}``)  pending in_progress completed
gemini             description, status (``write_todos``)        pending in_progress completed
                                                                cancelled blocked
=================  ===========================================  ==============================

We are liberal in what we accept (a bare list, a tool-call wrapper, Codex ``arguments`` as a
JSON-encoded string) and strict about what it means: an unknown status, a missing content,
duplicate ids or an oversized payload is an :class:`InputError` naming the item and field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from harness.errors import InputError, PayloadTooLarge

FORMATS = ("opencode", "claude", "codex", "gemini")
DEFAULT_MAX_PAYLOAD = 1024 * 1024

_CANONICAL_PRIORITIES = frozenset({"high", "medium", "low"})
PRIORITY_ALIASES = {"h": "high", "m": "medium", "l": "low", "high": "high",
                    "medium": "medium", "low": "low", "med": "medium"}


@dataclass(frozen=True)
class Capabilities:
    """What a format can say. A field it cannot say keeps its stored value on merge."""

    name: str
    statuses: frozenset[str]
    has_priority: bool
    has_active_form: bool
    has_id: bool

    @property
    def has_blocked(self) -> bool:
        return "blocked" in self.statuses

    @property
    def has_cancelled(self) -> bool:
        return "cancelled" in self.statuses


_BASIC = frozenset({"pending", "in_progress", "completed"})
OPENCODE = Capabilities("opencode", _BASIC | {"cancelled"}, True, False, False)
OPENCODE_IDS = Capabilities("opencode", _BASIC | {"cancelled"}, True, False, True)
CLAUDE_V1 = Capabilities("claude", _BASIC, True, False, True)
CLAUDE_V2 = Capabilities("claude", _BASIC, False, True, False)
CODEX = Capabilities("codex", _BASIC, False, False, False)
# Gemini CLI's write_todos (Gemini 2 models): a description and a status, which can say
# blocked and cancelled.
GEMINI = Capabilities("gemini", _BASIC | {"cancelled", "blocked"}, False, False, False)
# GitHub Copilot CLI's todos: rows of its session database (``todos``: id, title, status
# pending/in_progress/done/blocked), read whole after each change (harness.agents.copilot).
COPILOT = Capabilities("copilot", _BASIC | {"blocked"}, False, False, True)
# Claude Code >= 2.1.142 task tools (TaskCreate/TaskUpdate): ids and an active form, no
# priority. Importers build the whole list from the per-task calls.
CLAUDE_TASKS = Capabilities("claude", _BASIC, False, True, True)


class Item(NamedTuple):
    content: str
    status: str
    priority: str | None = None
    active_form: str | None = None
    agent_id: str | None = None


class ViewItem(NamedTuple):
    """One entry of the list as an agent knows it (see harness.merge)."""

    num: int | None
    content: str
    status: str
    priority: str | None = None
    active_form: str | None = None
    agent_id: str | None = None


@dataclass(frozen=True)
class AgentWrite:
    caps: Capabilities
    items: list[Item]
    explanation: str | None = None


def max_payload_bytes() -> int:
    try:
        return int(os.environ.get("HARNESS_MAX_PAYLOAD", DEFAULT_MAX_PAYLOAD))
    except ValueError:
        return DEFAULT_MAX_PAYLOAD


def read_limited(stream: Any, where: str = "stdin") -> str:
    """Read at most the payload limit; refuse (without reading it all) beyond it."""
    limit = max_payload_bytes()
    data = stream.read(limit + 1)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    if len(data) > limit:
        raise PayloadTooLarge(f"payload larger than {limit} bytes", where=where,
                              hint="set HARNESS_MAX_PAYLOAD to raise the limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"payload is not UTF-8 (byte {exc.start})", where=where) from None


def loads(text: str, where: str = "stdin") -> Any:
    if len(text.encode("utf-8", "surrogatepass")) > max_payload_bytes():
        raise PayloadTooLarge(f"payload larger than {max_payload_bytes()} bytes", where=where,
                              hint="set HARNESS_MAX_PAYLOAD to raise the limit")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                         where=where) from None
    except RecursionError:
        # Python's parser recurses per level: 100,000 nested arrays overflow its stack.
        raise InputError("JSON nested too deeply", where=where) from None


def _unwrap(obj: Any, where: str) -> Any:
    """Peel tool-call envelopes until we reach ``{todos}``, ``{plan}`` or a bare list."""
    for _ in range(4):
        if not isinstance(obj, Mapping):
            return obj
        if "todos" in obj or "plan" in obj:
            return obj
        for key in ("tool_input", "input", "arguments", "args", "params"):
            if key in obj:
                inner = obj[key]
                if isinstance(inner, str):
                    inner = loads(inner, f"{where}: {key}")
                obj = inner
                break
        else:
            return obj
    return obj


def parse(payload: Any, fmt: str = "auto", where: str = "stdin") -> AgentWrite:
    """Validate one agent payload (already JSON-decoded) into an :class:`AgentWrite`."""
    if fmt not in ("auto", *FORMATS):
        raise InputError(f"unknown format {fmt!r} (expected auto, {', '.join(FORMATS)})",
                         where=where)
    obj = _unwrap(payload, where)
    explanation = None
    if isinstance(obj, Mapping) and "plan" in obj and fmt in ("auto", "codex"):
        raw_items, path, kind = obj["plan"], "plan", "codex"
        explanation = obj.get("explanation") if isinstance(obj.get("explanation"), str) else None
    elif isinstance(obj, Mapping) and "todos" in obj:
        raw_items, path, kind = obj["todos"], "todos", None
    elif isinstance(obj, list):
        raw_items, path, kind = obj, "", None
    else:
        keys = ", ".join(sorted(obj)) if isinstance(obj, Mapping) else type(obj).__name__
        raise InputError(f"no todo list found (expected `todos` or `plan`; got {keys})",
                         where=where)
    if not isinstance(raw_items, list):
        raise InputError(f"`{path}` must be a list, not {type(raw_items).__name__}", where=where)
    for i, raw in enumerate(raw_items):
        if not isinstance(raw, Mapping):
            raise InputError(f"{path}[{i}] must be an object, not {type(raw).__name__}",
                             where=where)
    if kind is None:
        kind = fmt if fmt != "auto" else _detect(raw_items)
    caps = _caps_for(kind, raw_items)
    items = [_item(raw, caps, path, i, where) for i, raw in enumerate(raw_items)]
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.agent_id is None:
            continue
        if item.agent_id in seen:
            raise InputError(f"{path}[{i}].id: duplicate id {item.agent_id!r} "
                             f"(also {path}[{seen[item.agent_id]}])", where=where)
        seen[item.agent_id] = i
    return AgentWrite(caps=caps, items=items, explanation=explanation)


def _detect(items: list[Mapping[str, Any]]) -> str:
    if any("step" in it for it in items):
        return "codex"
    if any("description" in it for it in items) and not any(
            "content" in it or "subject" in it for it in items):
        return "gemini"
    if any("activeForm" in it or "active_form" in it for it in items):
        return "claude"
    return "opencode"


def _caps_for(kind: str, items: list[Mapping[str, Any]]) -> Capabilities:
    has_ids = any("id" in it for it in items)
    if kind == "codex":
        return CODEX
    if kind == "gemini":
        return GEMINI
    if kind == "claude":
        if any("activeForm" in it or "active_form" in it for it in items) or not has_ids:
            return CLAUDE_V2
        return CLAUDE_V1
    return OPENCODE_IDS if has_ids else OPENCODE


_TEXT_KEY = {"codex": "step", "gemini": "description"}


def _item(raw: Mapping[str, Any], caps: Capabilities, path: str, i: int, where: str) -> Item:
    # Hot path (every agent write): plain lookups first, the error text only on failure.
    key = _TEXT_KEY.get(caps.name, "content")
    content = raw.get(key)
    if content is None and key == "content":
        content = raw.get("subject")
    if type(content) is not str or not content.strip():
        raise InputError(f"{_loc(path, i)}: missing {key}", where=where)
    status = raw.get("status")
    if status not in caps.statuses:
        loc = _loc(path, i)
        if status is None:
            raise InputError(f"{loc}.status: missing status", where=where)
        allowed = ", ".join(s for s in ("pending", "in_progress", "completed", "cancelled",
                                        "blocked") if s in caps.statuses)
        raise InputError(f"{loc}.status: unknown status {status!r} for {caps.name} "
                         f"(expected one of {allowed})", where=where)
    priority = raw.get("priority") if caps.has_priority else None
    if priority is not None and priority not in _CANONICAL_PRIORITIES:
        priority = normalize_priority(priority, f"{_loc(path, i)}.priority", where)
    active_form = None
    if caps.has_active_form:
        active_form = raw.get("activeForm", raw.get("active_form"))
        if active_form is not None and type(active_form) is not str:
            raise InputError(f"{_loc(path, i)}.activeForm: must be text", where=where)
    agent_id = raw.get("id") if caps.has_id else None
    if agent_id is not None:
        agent_id = str(agent_id)
    return Item(content, status, priority, active_form, agent_id)


def _loc(path: str, i: int) -> str:
    return f"{path}[{i}]" if path else f"[{i}]"


def normalize_priority(value: Any, loc: str = "priority", where: str | None = None) -> str:
    if value in _CANONICAL_PRIORITIES:
        return value
    if isinstance(value, str) and value.strip().lower() in PRIORITY_ALIASES:
        return PRIORITY_ALIASES[value.strip().lower()]
    raise InputError(f"{loc}: unknown priority {value!r} (expected high, medium, low or H/M/L)",
                     where=where)


# -- rendering a list back in an agent's own shape --------------------------------------

def agent_status(status: str, caps: Capabilities) -> str:
    """Our status in a format that may not have it: blocked reads as pending, cancelled
    as completed (the agent must not start it again)."""
    if status in caps.statuses:
        return status
    if status == "blocked":
        return "pending"
    if status == "cancelled":
        return "completed"
    return status


def render_item(v: ViewItem, caps: Capabilities) -> dict[str, Any]:
    """One entry of the list we hand back, in the agent's own shape."""
    if caps.name in _TEXT_KEY:
        return {_TEXT_KEY[caps.name]: v.content, "status": v.status}
    out: dict[str, Any] = {}
    if caps.has_id:
        out["id"] = v.agent_id or f"t{v.num}"
    out["content"] = v.content
    out["status"] = v.status
    if caps.has_priority:
        out["priority"] = v.priority or "medium"
    if caps.has_active_form:
        out["activeForm"] = v.active_form or v.content
    return out


def render_list(view: Iterable[ViewItem], caps: Capabilities) -> dict[str, Any]:
    items = [render_item(v, caps) for v in view]
    return {"plan": items} if caps.name == "codex" else {"todos": items}


def caps_named(name: str) -> Capabilities:
    return {"opencode": OPENCODE, "claude": CLAUDE_V2, "codex": CODEX, "gemini": GEMINI}[name]
