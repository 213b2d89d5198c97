"""The tools an agent calls (through ``harness mcp``), apart from any transport.

Each tool is a :class:`ToolSpec`: a name, a description written for the model, a JSON
schema for its arguments, and a handler that takes plain JSON arguments and returns an
:class:`Answer` (a JSON-able dict, plus the text the model reads). Arguments are checked
against the schema (and the payload size limit) before the handler runs, and every
problem is a :class:`harness.errors.HarnessError` naming the argument, so the server can
hand it back as a tool error and carry on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

from harness import formats
from harness import todos as uc
from harness.agents.todolist import prompt_block, todo_json, todowrite
from harness.context import Harness
from harness.errors import InputError, NoSession, PayloadTooLarge, UsageError
from harness.merge import view_of
from harness.render import describe, safe_line
from state.fold import (
    RUN_FINAL,
    STATUSES,
    RunState,
    SessionState,
    VerificationState,
    diff_todo,
    unmet_dependencies,
)
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
            path = _json_path(err.absolute_path)
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise InputError(f"{path}: {err.message}{more}" if path else err.message + more,
                             where=self.name)

    def call(self, env: ToolEnv, args: Mapping[str, Any] | None) -> Answer:
        args = dict(args or {})
        self.check(args)
        return self.handler(env, args)


def _json_path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


# -- schemas --------------------------------------------------------------------------

# Repeated in every tool's schema: each word here costs the agent's context nine times.
_SESSION = {"type": "string", "minLength": 1,
            "description": "Session name (default: the server's)."}
_TODO_ID = {"type": ["string", "integer"], "pattern": r"^\s*[tT]?\d+\s*$", "minimum": 1,
            "description": "e.g. \"t3\""}
_RUN_ID = {"type": ["string", "integer"], "pattern": r"^\s*[rR]?\d+\s*$", "minimum": 1,
           "description": "e.g. \"r2\""}
_PRIORITY = {"type": "string", "enum": ["high", "medium", "low", "H", "M", "L"]}


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required),
            "additionalProperties": False}


TODOWRITE_SCHEMA = _obj({
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
    "session": _SESSION,
}, ("todos",))

_TODOWRITE_CHECK = _obj({
    "todos": {"type": "array", "items": {"type": "object"}},
    "format": TODOWRITE_SCHEMA["properties"]["format"],
    "session": _SESSION,
}, ("todos",))


# -- todo tools ------------------------------------------------------------------------

def _todowrite(env: ToolEnv, args: dict[str, Any]) -> Answer:
    write = formats.parse({"todos": args["todos"]}, args.get("format", "auto"), "todowrite")
    sess = env.session(args.get("session"))
    result = todowrite(env.harness.store, sess.id, write, actor=env.actor, sees_response=True)
    data = result.response()
    data["ids"] = [f"t{v.num}" for v in result.view]
    data["notes"] = result.notes
    data["session"] = sess.name
    data["events"] = result.events
    return Answer(data)


def _todoread(env: ToolEnv, args: dict[str, Any]) -> Answer:
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


def _todo_update(env: ToolEnv, args: dict[str, Any]) -> Answer:
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


def _claim_next(env: ToolEnv, args: dict[str, Any]) -> Answer:
    from harness.agents.claims import next_ready, render_next
    from harness.todos import parse_lease

    sess = env.session(args.get("session"))
    lease = parse_lease(args["lease"], "lease") if "lease" in args else None
    found = next_ready(env.harness.store, sess.id, claim=True, actor=env.actor, lease=lease)
    text, data = render_next(found, sess.name, claimed=True)
    return Answer(data, text)


# -- pipeline, runs, verification ------------------------------------------------------

def run_json(r: RunState) -> dict[str, Any]:
    d = asdict(r)
    d["id"] = f"r{r.id}"
    d["todo"] = f"t{r.todo_id}" if r.todo_id is not None else None
    del d["todo_id"]
    d.pop("job", None)  # how to reach the host again: the runner's business, not the agent's
    return d


def verification_json(v: VerificationState) -> dict[str, Any]:
    d = asdict(v)
    d["id"] = f"v{v.id}"
    d["todo"] = f"t{v.todo_id}" if v.todo_id is not None else None
    d["run"] = f"r{v.run_id}" if v.run_id is not None else None
    del d["todo_id"], d["run_id"]
    return d


def _parse_run(value: Any) -> int:
    text = str(value).strip().lstrip("rR")
    if not text.isdigit():
        raise InputError(f"not a run id: {value!r} (expected something like r2)")
    return int(text)


def _pipeline_status(env: ToolEnv, args: dict[str, Any]) -> Answer:
    from harness.runner import stage_status  # what `harness status` shows, the same way

    sess = env.session(args.get("session"))
    store = env.harness.store
    n_lines = args.get("log_lines", DEFAULT_TAIL_LINES)
    stages = stage_status(store, sess.id, n_lines)
    by_num = {t.num: t for t in store.todos(sess.id)}
    for row in stages:
        t = by_num.get(uc.parse_id(row["todo"]))
        row["waiting_on"] = [f"t{d}" for d in unmet_dependencies(t, by_num)] if t else []
    runs = store.runs(sess.id)
    active = [r for r in runs if r.state not in RUN_FINAL]
    data = {"session": sess.name, "pipeline": sess.pipeline, "stages": stages,
            "active_runs": [run_json(r) for r in active]}
    lines = [f"session {sess.name}" + (f", pipeline {sess.pipeline}" if sess.pipeline else "")]
    if not stages:
        lines.append("no pipeline stages yet (a person starts them with "
                     "`harness run PIPELINE.yaml`)")
    for s in stages:
        last = s["last_run"]
        run_txt = f", last run {last['id']} {last['state']} on {last['host']}" if last else ""
        waits = f" - waiting on {', '.join(s['waiting_on'])}" if s["waiting_on"] else ""
        extra = f" - blocked: {safe_line(s['blocked_reason'] or '')}" \
            if s["status"] == "blocked" else ""
        lines.append(f"stage {s['stage']} ({s['todo']}): {s['status']}{run_txt}{waits}{extra}")
        lines.extend(f"  | {safe_line(x)}" for x in s["log_tail"])
    return Answer(data, "\n".join(lines) + "\n" + json.dumps(data, indent=2,
                                                             ensure_ascii=False, default=str))


def _run_stage(env: ToolEnv, args: dict[str, Any]) -> Answer:
    from harness.runner import start_stage

    sess = env.session(args.get("session"))
    store = env.harness.store
    spec = args.get("pipeline") or store.pipeline_spec(sess.id)
    if not spec:
        raise UsageError("this session has no pipeline yet: pass `pipeline` (the spec file "
                         "a person runs with `harness run`)", where="run_stage")
    run = start_stage(store, sess.name, spec, args["stage"])
    data = {"run": f"r{run.id}", "stage": run.stage, "todo": f"t{run.todo_id}",
            "host": run.host, "state": run.state, "pipeline": spec}
    return Answer(data, f"started stage {run.stage} as r{run.id} on {run.host} (todo "
                        f"t{run.todo_id}); follow it with run_logs {{\"run\": \"r{run.id}\"}} "
                        "and pipeline_status")


def _run_logs(env: ToolEnv, args: dict[str, Any]) -> Answer:
    store = env.harness.store
    run_id = _parse_run(args["run"])
    _sid, run = store.run(run_id)
    offset = args.get("offset", 0)
    limit = args.get("max_bytes", DEFAULT_LOG_BYTES)
    data, _ = store.log(run_id, offset)
    raw = data.encode()
    if len(raw) > limit:
        data = raw[:limit].decode("utf-8", "ignore")  # never split a character
        raw = data.encode()
    nxt = offset + len(raw)
    end = store.log_end(run_id)
    out = {"run": f"r{run_id}", "state": run.state, "offset": offset, "next_offset": nxt,
           "more": nxt < end, "finished": run.state in RUN_FINAL and nxt >= end,
           "exit_code": run.exit_code, "data": data}
    return Answer(out)


def _verification_results(env: ToolEnv, args: dict[str, Any]) -> Answer:
    sess = env.session(args.get("session"))
    store = env.harness.store
    todo = uc.parse_id(args["todo"]) if args.get("todo") is not None else None
    run = _parse_run(args["run"]) if args.get("run") is not None else None
    ckpt = args.get("checkpoint")
    found = store.verifications(sess.id, todo_id=todo)
    if run is not None:
        found = [v for v in found if v.run_id == run]
    if ckpt:
        found = [v for v in found if (v.artifact and ckpt in v.artifact)
                 or (v.sha256 and v.sha256.startswith(ckpt))]
    found = found[-args.get("limit", 20):]
    data = {"session": sess.name, "verifications": [verification_json(v) for v in found]}
    lines = [f"{len(found)} verification(s) in session {sess.name}"]
    for v in found:
        head = f"v{v.id}" + (f" t{v.todo_id}" if v.todo_id is not None else "") \
            + (f" r{v.run_id}" if v.run_id is not None else "")
        lines.append(f"{head} {'PASSED' if v.passed else 'FAILED'} ({v.kind}"
                     + (f", {safe_line(v.artifact, 60)}" if v.artifact else "") + "): "
                     + safe_line(v.verdict, 200))
    return Answer(data, "\n".join(lines) + "\n" + json.dumps(data, indent=2,
                                                             ensure_ascii=False, default=str))


# -- replay ------------------------------------------------------------------------------

def _list_at(env: ToolEnv, sid: int, n: int) -> SessionState:
    return env.harness.store.state_at(sid, n)


def _check_n(name: str, n: int, last: int) -> None:
    if n > last:
        raise InputError(f"{name}: event {n} does not exist yet (the session has {last})",
                         where="replay")


def _replay(env: ToolEnv, args: dict[str, Any]) -> Answer:
    sess = env.session(args.get("session"))
    store = env.harness.store
    last = store.last_n(sess.id)
    at, a, b = args.get("at"), args.get("from"), args.get("to")
    if at is not None and (a is not None or b is not None):
        raise UsageError("give either `at`, or `from` (and optionally `to`), not both",
                         where="replay")
    if at is None and a is None:
        raise UsageError("give `at` (the list at event N) or `from` (changes since event "
                         "N, up to `to` or now)", where="replay")
    if at is not None:
        _check_n("at", at, last)
        st = _list_at(env, sess.id, at)
        todos = st.by_position()
        by_num = {t.num: t for t in todos}
        data = {"session": sess.name, "at": at, "last": last,
                "todos": [todo_json(t, by_num) for t in todos]}
        return Answer(data, f"the list at event {at} of {last}:\n"
                            + prompt_block(todos, sess.name) + "\n"
                            + json.dumps(data, indent=2, ensure_ascii=False))
    b = last if b is None else b
    _check_n("from", a, last)
    _check_n("to", b, last)
    if a > b:
        raise InputError(f"from ({a}) is after to ({b})", where="replay")
    old, new = _list_at(env, sess.id, a).todos, _list_at(env, sess.id, b).todos
    by_num = dict(new)
    changes = {
        "added": [todo_json(new[k], by_num) for k in sorted(new.keys() - old.keys())],
        "removed": [{"id": f"t{k}", "content": old[k].content, "status": old[k].status}
                    for k in sorted(old.keys() - new.keys())],
        "changed": [{"id": f"t{k}", "content": new[k].content,
                     "changes": diff_todo(old[k], new[k])}
                    for k in sorted(old.keys() & new.keys()) if diff_todo(old[k], new[k])],
    }
    events = store.events(sess.id, after_n=a, upto_n=b, limit=MAX_REPLAY_EVENTS + 1)
    listed = [{"n": e.n, "ts": e.ts, "actor": e.actor, "kind": e.kind,
               "todo": f"t{e.todo_id}" if e.todo_id is not None else None,
               "what": describe(e)} for e in events[:MAX_REPLAY_EVENTS]]
    data = {"session": sess.name, "from": a, "to": b, "last": last, "changes": changes,
            "events": listed, "events_truncated": len(events) > MAX_REPLAY_EVENTS}
    lines = [f"changes from event {a} to {b} (of {last}): {len(changes['added'])} added, "
             f"{len(changes['removed'])} removed, {len(changes['changed'])} changed"]
    lines += [f"#{e['n']} {e['actor']} {e['todo'] or ''} {e['what']}" for e in listed]
    return Answer(data, "\n".join(lines) + "\n" + json.dumps(data, indent=2,
                                                             ensure_ascii=False, default=str))


# -- the catalogue -----------------------------------------------------------------------

TOOLS: dict[str, ToolSpec] = {t.name: t for t in [
    ToolSpec(
        "todowrite", "Write the todo list",
        "Save your todo list in the harness (a durable store shared with people and other "
        "agents). Send the WHOLE list each time, in opencode shape ({content, status, "
        "priority}) or Claude Code shape ({content, status, activeForm}). The harness "
        "merges it, it does not overwrite: a priority or status a person set survives when "
        "you resend the old value, items a person added are kept even if you leave them "
        "out, and a blocked item stays blocked until you move it to in_progress or "
        "completed. The answer is the resulting list in your own shape (people's items "
        "included), `ids` (the harness id of each item, for todo_update), and `notes` on "
        "what others changed since your last write. Read the notes.",
        TODOWRITE_SCHEMA, _todowrite, read_only=False, check_schema=_TODOWRITE_CHECK),
    ToolSpec(
        "todoread", "Read the todo list",
        "The current todo list, including items people added and what is blocked and why. "
        "format: prompt (compact, default), json (every field), opencode or claude (your "
        "own shape, to resend with todowrite).",
        _obj({"format": {"type": "string", "enum": ["prompt", "json", "opencode", "claude"],
                         "default": "prompt"},
              "session": _SESSION}), _todoread),
    ToolSpec(
        "todo_update", "Update one todo",
        "Change one item by id (\"t3\"): its status, its priority, or its blocked reason. "
        "Blocking needs a reason; a reason alone blocks the item; any other status clears "
        "the reason. Cheaper than resending the whole list.",
        _obj({"id": _TODO_ID,
              "status": {"type": "string", "enum": list(STATUSES)},
              "priority": _PRIORITY,
              "blocked_reason": {"type": "string", "minLength": 1,
                                 "description": "Why it is blocked, with the measured "
                                                "numbers if a check failed."},
              "session": _SESSION}, ("id",)), _todo_update, read_only=False),
    ToolSpec(
        "claim_next", "Claim the next todo",
        "Take the highest-priority ready todo (pending, dependencies done, not a pipeline "
        "stage) and mark it in_progress as yours, atomically: agents working in parallel "
        "never get the same one. Answers with the todo, or why nothing is ready. With a "
        "`lease`, the todo goes back to pending if you make no call for that long; every "
        "call renews it.",
        _obj({"lease": {"type": ["string", "number"], "minLength": 1, "minimum": 0,
                        "description": "e.g. \"15m\"; \"none\": never expires. "
                                       "Default: the session's."},
              "session": _SESSION}), _claim_next, read_only=False),
    ToolSpec(
        "pipeline_status", "Pipeline status",
        "Where the pipeline stands: each stage bound to a todo (status, what it waits on, "
        "why it is blocked, its last run with host, duration and exit code, and the last "
        "lines of that run's log), and the runs in flight.",
        _obj({"log_lines": {"type": "integer", "minimum": 0, "maximum": 200,
                            "default": DEFAULT_TAIL_LINES},
              "session": _SESSION}), _pipeline_status),
    ToolSpec(
        "run_stage", "Start a pipeline stage",
        "Start one stage of the session's pipeline now, in the background, and get its run "
        "id at once (the stage's todo goes in_progress; its checks and gate decide whether "
        "it ends completed or blocked). The stage's dependencies must be completed. "
        "`pipeline` is the spec file; by default the one this session last ran.",
        _obj({"stage": {"type": "string", "minLength": 1},
              "pipeline": {"type": "string", "minLength": 1},
              "session": _SESSION}, ("stage",)), _run_stage, read_only=False),
    ToolSpec(
        "run_logs", "Read a run's log",
        "A run's log from a byte offset. Call again with `next_offset` to follow it; "
        "`more` says whether more is stored already, `finished` whether the run has ended "
        "and you have read everything.",
        _obj({"run": _RUN_ID,
              "offset": {"type": "integer", "minimum": 0, "default": 0},
              "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_BYTES,
                            "default": DEFAULT_LOG_BYTES}}, ("run",)), _run_logs),
    ToolSpec(
        "verification_results", "Verification results",
        "Verification results (checks that measure function, not just form: acceptance "
        "length, a benchmark's served speedup; a verify row's speedups are its reference "
        "loop's upper bounds, not served) for a todo, a run, or a checkpoint (a path "
        "fragment or sha256 prefix), newest last.",
        _obj({"todo": _TODO_ID, "run": _RUN_ID,
              "checkpoint": {"type": "string", "minLength": 1},
              "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
              "session": _SESSION}), _verification_results),
    ToolSpec(
        "replay", "Replay the list",
        "The past of the todo list. `at`: the list as it was just after event N. `from` "
        "(and `to`, default now): what changed between two events, with the events "
        "themselves (who did what).",
        _obj({"at": {"type": "integer", "minimum": 0},
              "from": {"type": "integer", "minimum": 0},
              "to": {"type": "integer", "minimum": 0},
              "session": _SESSION}), _replay),
]}


def select_tools(names: str | None) -> dict[str, ToolSpec]:
    """The tools ``harness mcp --tools a,b,c`` serves (None or empty: all of them)."""
    if not names or not names.strip():
        return dict(TOOLS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in TOOLS]
    if unknown:
        raise UsageError(f"unknown tool {unknown[0]!r} (known: {', '.join(TOOLS)})",
                         where="--tools")
    return {n: TOOLS[n] for n in TOOLS if n in wanted}


def call(env: ToolEnv, name: str, args: Mapping[str, Any] | None) -> Answer:
    spec = TOOLS.get(name)
    if spec is None:
        raise UsageError(f"unknown tool {name!r} (known: {', '.join(TOOLS)})")
    return spec.call(env, args)
