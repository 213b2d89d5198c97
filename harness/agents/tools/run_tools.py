"""The tools on the pipeline, its runs and their verification, and the replay of a
session's list."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from harness import todos as uc
from harness.agents.todolist import prompt_block, todo_json
from harness.agents.tools.spec import (
    DEFAULT_LOG_BYTES,
    DEFAULT_TAIL_LINES,
    MAX_REPLAY_EVENTS,
    Answer,
    ToolEnv,
)
from harness.errors import InputError, UsageError
from harness.gates import outcome
from harness.render import describe, safe_line
from state.fold import (
    RUN_FINAL,
    RunState,
    SessionState,
    VerificationState,
    diff_todo,
    unmet_dependencies,
)


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


def pipeline_status_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
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


def run_stage_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
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


def run_logs_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
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


def verification_results_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
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
        lines.append(f"{head} {outcome(v.passed, v.checks, v.gate, v.metrics).upper()} "
                     f"({v.kind}"
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


def replay_tool(env: ToolEnv, args: dict[str, Any]) -> Answer:
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
