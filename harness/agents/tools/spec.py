"""What every tool is made of: :class:`ToolSpec` (a name, a description written for the
model, a JSON schema, a handler), :class:`ToolEnv` (the store and the caller),
:class:`Answer`, and the schema pieces the tools repeat."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from harness import formats
from harness.context import Harness
from harness.errors import InputError, NoSession, PayloadTooLarge
from state.read.readers import SessionInfo

MAX_LOG_BYTES = 1024 * 1024
DEFAULT_LOG_BYTES = 64 * 1024
DEFAULT_TAIL_LINES = 10
MAX_REPLAY_EVENTS = 200


@dataclass
class Answer:
    data: dict[str, Any]
    text: str | None = None  # what the model reads; the JSON of ``data`` when None

    def render(self) -> str:
        return self.text if self.text is not None else json.dumps(
            self.data, indent=2, ensure_ascii=False, default=str)


@dataclass
class ToolEnv:
    """What one call runs against: the store (through a Harness) and who is calling."""

    harness: Harness
    actor: str

    def session(self, name: str | None) -> SessionInfo:
        if not name:
            return self.harness.session()
        row = self.harness.store.session_by_name(name)
        if row is None:
            raise NoSession(f"no session named {name!r}", where=self.harness.store.where,
                            hint=f"create it with `harness session new {name}`, or leave "
                                 "`session` out for the server's own session")
        return row


Handler = Callable[[ToolEnv, dict[str, Any]], Answer]


@dataclass
class ToolSpec:
    name: str
    title: str
    description: str
    schema: dict[str, Any]
    handler: Handler
    read_only: bool = True
    # What the arguments are checked against, if not ``schema`` (todowrite checks its
    # items itself, with messages that name the item and field).
    check_schema: dict[str, Any] | None = None

    @cached_property
    def validator(self) -> Any:
        import jsonschema  # the mcp SDK depends on it; loaded only when a server runs

        return jsonschema.Draft202012Validator(self.check_schema or self.schema)

    def check(self, args: Mapping[str, Any]) -> None:
        try:
            size = len(json.dumps(args, ensure_ascii=False).encode())
        except RecursionError:
            raise InputError("arguments are nested too deeply", where=self.name) from None
        if size > formats.max_payload_bytes():
            raise PayloadTooLarge(f"arguments are {size} bytes, over the limit of "
                                  f"{formats.max_payload_bytes()}", where=self.name,
                                  hint="set HARNESS_MAX_PAYLOAD on the server to raise it")
        errors = sorted(self.validator.iter_errors(dict(args)),
                        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
        if errors:
            err = errors[0]
            path = json_path(err.absolute_path)
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise InputError(f"{path}: {err.message}{more}" if path else err.message + more,
                             where=self.name)

    def call(self, env: ToolEnv, args: Mapping[str, Any] | None) -> Answer:
        args = dict(args or {})
        self.check(args)
        return self.handler(env, args)


def json_path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


# -- schemas --------------------------------------------------------------------------

# Repeated in every tool's schema: each word here costs the agent's context nine times.
SESSION_ARG = {"type": "string", "minLength": 1,
            "description": "Session name (default: the server's)."}
TODO_ID_ARG = {"type": ["string", "integer"], "pattern": r"^\s*[tT]?\d+\s*$", "minimum": 1,
            "description": "e.g. \"t3\""}
RUN_ID_ARG = {"type": ["string", "integer"], "pattern": r"^\s*[rR]?\d+\s*$", "minimum": 1,
           "description": "e.g. \"r2\""}
PRIORITY_ARG = {"type": "string", "enum": ["high", "medium", "low", "H", "M", "L"]}


def obj_schema(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required),
            "additionalProperties": False}
