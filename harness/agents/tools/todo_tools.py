"""The todo tools: todowrite, todoread, todo_update and claim_next."""

from __future__ import annotations

import json
from typing import Any

from harness import formats
from harness import todos as uc
from harness.agents.todolist import prompt_block, todo_json, todowrite
from harness.agents.tools.spec import SESSION_ARG, Answer, ToolEnv, obj_schema
from harness.merge import view_of
from harness.render import safe_line

TODOWRITE_SCHEMA = obj_schema({
    "todos": {
        "type": "array",
        "description": "The WHOLE list, every time: items you leave out are removed, except "
                       "items a person or the pipeline added.",
        "items": {
            "type": "object",
            "properties": {
                "content": {"type": "string", "minLength": 1,
                            "description": "What to do (imperative: \"Run tests\")."},
                "status": {"type": "string",
                           "enum": ["pending", "in_progress", "completed", "cancelled"]},
                "priority": {"type": "string", "enum": ["high", "medium", "low"],
                             "description": "opencode shape only."},
                "activeForm": {"type": "string",
                               "description": "Claude Code shape: the present-continuous "
                                              "form (\"Running tests\")."},
                "id": {"type": "string", "description": "Optional; older opencode and "
                                                        "Claude Code v1 lists carry one."},
            },
            "required": ["content", "status"],
        },
    },
    "format": {"type": "string", "enum": ["auto", "opencode", "claude"], "default": "auto",
               "description": "The shape of `todos`; auto tells them apart by activeForm."},
    "session": SESSION_ARG,
}, ("todos",))

TODOWRITE_CHECK = obj_schema({
    "todos": {"type": "array", "items": {"type": "object"}},
    "format": TODOWRITE_SCHEMA["properties"]["format"],
    "session": SESSION_ARG,
}, ("todos",))



def todowrite_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
    write = formats.parse({"todos": args["todos"]}, args.get("format", "auto"), "todowrite")
    sess = env.session(args.get("session"))
    result = todowrite(env.harness.store, sess.id, write, actor=env.actor, sees_response=True)
    data = result.response()
    data["ids"] = [f"t{v.num}" for v in result.view]
    data["notes"] = result.notes
    data["session"] = sess.name
    data["events"] = result.events
    return Answer(data)


def todoread_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
    sess = env.session(args.get("session"))
    store = env.harness.store
    if args.get("session"):
        store.expire_lapsed(sess.id)  # the server's own session: renewal did (mcp_server)
    todos = sorted(store.todos(sess.id), key=lambda t: (t.position, t.num))
    by_num = {t.num: t for t in todos}
    # Who holds what (claimed_by), not the lease times: every key costs the agent's
    # context on every read, and its own leases renew by themselves.
    data = {"session": sess.name, "todos": [todo_json(t, by_num) for t in todos]}
    fmt = args.get("format", "prompt")
    if fmt == "json":
        return Answer(data)
    if fmt == "prompt":
        return Answer(data, prompt_block(todos, sess.name))
    caps = formats.caps_named(fmt)
    shaped = formats.render_list(view_of(todos, caps), caps)
    shaped["ids"] = [t.id for t in todos]
    return Answer({**data, fmt: shaped}, json.dumps(shaped, indent=2, ensure_ascii=False))


def todo_update_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
    sess = env.session(args.get("session"))
    out = uc.update_item(env.harness.store, sess.id, args["id"], status=args.get("status"),
                         priority=args.get("priority"),
                         blocked_reason=args.get("blocked_reason"), actor=env.actor)
    todos = {t.num: t for t in env.harness.store.todos(sess.id)}
    data = {"session": sess.name, "todo": todo_json(out.todo, todos), "changed": out.changed}
    what = "; ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in out.changed.items()) \
        or "nothing changed"
    return Answer(data, f"{out.todo.id} {safe_line(out.todo.content, 80)}: {what}\n"
                        + json.dumps(data, indent=2, ensure_ascii=False))


def claim_next_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
    from harness.agents.claims import next_ready, render_next
    from harness.todos import parse_lease

    sess = env.session(args.get("session"))
    lease = parse_lease(args["lease"], "lease") if "lease" in args else None
    found = next_ready(env.harness.store, sess.id, claim=True, actor=env.actor, lease=lease)
    text, data = render_next(found, sess.name, claimed=True)
    return Answer(data, text)
