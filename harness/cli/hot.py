"""The commands an agent runs on every todo change, without click.

``harness todowrite``, ``todoread``, ``next``, ``heartbeat`` and ``hook AGENT`` (each
agent of :mod:`harness.agents.registry`) are fresh processes each time, and a Claude Code
hook runs on every todo call: importing click, the rest of the CLI and SQLAlchemy cost
them most of their time (docs/PERFORMANCE.md, "Agent calls"). Here their command lines are read by hand, with the
global ``--db``/``--session`` anywhere, as click reads them. A line with anything else
(``--help``, an option or a value this parser does not know, a subcommand such as
``hook claude-code install``) is not ours: :func:`run` returns None and the click
application handles it, error messages included. The click commands call the same bodies
below, so the two routes cannot drift apart.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import KNOWN_ERRORS, InputError

FLAG = object()  # an option without a value
TODOWRITE_FORMATS = ("auto", "opencode", "claude", "codex", "gemini")
TODOREAD_FORMATS = ("prompt", "json", "opencode", "claude", "codex", "gemini")

# command words -> {option: FLAG, or the values it may take (None: any)}
COMMANDS: dict[tuple[str, ...], dict[str, Any]] = {
    ("todowrite",): {"--format": TODOWRITE_FORMATS, "--actor": None, "--file": None,
                     "--no-response-view": FLAG},
    ("todoread",): {"--format": TODOREAD_FORMATS},
    ("next",): {"--claim": FLAG, "--actor": None, "--json": FLAG, "--lease": None},
    ("heartbeat",): {"--actor": None, "--json": FLAG},
}
GLOBAL = {"--db": "db", "--session": "session", "-s": "session"}

_open: list[Any] = []  # the Harness this invocation opened, closed by close()
# What this process read on stdin: a command that runs again (the store went away, see
# harness.cli.main) reads the same payload again.
_stdin: list[str] = []


def hook_spec(name: str) -> dict[str, Any] | None:
    """The options of ``hook NAME``, from the agent's registry row (None: no such agent):
    ``--actor``, and ``--event``/``--payload`` where its payloads need them."""
    from harness.agents.registry import AGENTS, agent

    if name not in AGENTS:
        return None
    a = agent(name)
    spec: dict[str, Any] = {"--actor": None}
    if a.hook_events:
        spec["--event"] = a.hook_events
    if a.hook_payload_arg:
        spec["--payload"] = None
    return spec


def _spec(words: tuple[str, ...]) -> dict[str, Any] | None:
    if len(words) == 2 and words[0] == "hook":
        return hook_spec(words[1])
    return COMMANDS.get(words)


def _known_prefix(words: tuple[str, ...]) -> bool:
    return words == ("hook",) or any(c[: len(words)] == words for c in COMMANDS)


def parse(args: list[str]) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """(command words, options) if this line is one of ours, exactly; else None."""
    words: list[str] = []
    opts: dict[str, Any] = {}
    spec: dict[str, Any] | None = None
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok.startswith("-"):
            name, eq, value = tok.partition("=")
            if name in GLOBAL or (spec is not None and name in spec):
                allowed = spec.get(name) if spec is not None and name in spec else None
                if allowed is FLAG:
                    if eq:
                        return None
                    opts[name] = True
                    continue
                if not eq:
                    if i >= len(args):
                        return None
                    value = args[i]
                    i += 1
                if allowed is not None and value not in allowed:
                    return None  # click names the choices
                opts[GLOBAL.get(name, name)] = value
                continue
            return None
        if spec is not None:
            return None  # a positional argument after the command: not one of ours
        words.append(tok)
        spec = _spec(tuple(words))
        if spec is None and not _known_prefix(tuple(words)):
            return None
    if spec is None:
        return None
    return tuple(words), opts


def run(args: list[str]) -> int | None:
    """Run the line if it is one of ours (returns the exit code); None if it is not.
    ``HARNESS_NO_FAST_PATH=1`` sends every line to click (bench/agents/latency.py compares
    the two routes)."""
    if os.environ.get("HARNESS_NO_FAST_PATH") == "1":
        return None
    parsed = parse(args)
    if parsed is None:
        return None
    words, opts = parsed
    db, session = opts.pop("db", None), opts.pop("session", None)
    if words[0] == "hook":
        return hook(words[1], db=db, session=session, actor=opts.get("--actor"),
                    event=opts.get("--event"), payload=opts.get("--payload"))
    h = _harness(db, session)
    if words == ("todowrite",):
        todowrite(h, fmt=opts.get("--format", "auto"), actor=opts.get("--actor"),
                  path=Path(opts["--file"]) if "--file" in opts else None,
                  no_response_view=bool(opts.get("--no-response-view")))
    elif words == ("todoread",):
        todoread(h, opts.get("--format", "prompt"))
    elif words == ("heartbeat",):
        return heartbeat(h, actor=opts.get("--actor"), as_json=bool(opts.get("--json")))
    else:
        return next_todo(h, claim=bool(opts.get("--claim")), actor=opts.get("--actor"),
                         as_json=bool(opts.get("--json")), lease=opts.get("--lease"))
    return 0


def _harness(db: str | None, session: str | None, *, announce: bool = True,
             cwd: Path | None = None) -> Any:
    from harness.context import Harness

    h = Harness(db=db, session=session, announce=announce, cwd=cwd)
    _open.append(h)
    return h


def close() -> None:
    """Close what :func:`run` opened (Ctrl-C during the close propagates, once all is
    closed)."""
    while _open:
        _open.pop().close()


def forget_input() -> None:
    """The command line is done: the next one (in this process) reads stdin afresh."""
    _stdin.clear()


def out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def note(text: str) -> None:
    sys.stderr.write(text + "\n")


def read_text(path: Path | None, where: str) -> str:
    """One payload's text from a file or stdin, within the size limit."""
    from harness import formats

    if path is not None:
        try:
            with path.open("rb") as fh:
                return formats.read_limited(fh, where)
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror})", where=where) from None
    if not _stdin:
        _stdin.append(formats.read_limited(sys.stdin.buffer, where))
    return _stdin[0]


def parse_payload(text: str, where: str,
                  empty: str = "empty payload (expected one JSON object)") -> Any:
    from harness import formats

    if not text.strip():
        raise InputError(empty, where=where)
    return formats.loads(text, where)


def read_payload(path: Path | None, where: str,
                 empty: str = "empty payload (expected one JSON object)") -> Any:
    """One JSON payload from a file or stdin, within the size limit."""
    return parse_payload(read_text(path, where), where, empty)


# -- the bodies (the click commands call these too) ---------------------------------------

def todowrite(h: Any, *, fmt: str, actor: str | None, path: Path | None,
              no_response_view: bool) -> None:
    from harness import formats
    from harness.agents.todolist import agent_actor
    from harness.agents.todolist import todowrite as write_list
    from state.interrupts import hold_after_commit

    where = str(path) if path else "stdin"
    write = formats.parse(read_payload(path, where), fmt, where)
    sid = h.session().id
    # A Ctrl-C before the COMMIT rolls the write back (exit 130, no notes); one after it
    # is held and dropped at exit, so a write that landed answers, prints its notes and
    # exits 0 (harness.cli.main).
    hold_after_commit()
    result = write_list(h.store, sid, write, actor=agent_actor(actor, write.caps),
                        sees_response=not no_response_view)
    out(json.dumps(result.response(), indent=2, ensure_ascii=False, default=str))
    for line in result.notes:
        note(f"note: {line}")


def todoread(h: Any, fmt: str) -> None:
    from harness.agents.todolist import todoread as read_list

    sess = h.session()
    out(read_list(h.store, sess.id, fmt, session_name=sess.name))


def next_todo(h: Any, *, claim: bool, actor: str | None, as_json: bool,
              lease: str | None = None) -> int:
    """``harness next``: the todo to work on now (claimed, with ``--claim``, for
    ``--lease``). Exit 0 with one, 1 when nothing is ready (so scripts can loop on it)."""
    from harness.agents.claims import next_ready, render_next
    from harness.errors import UsageError

    seconds = None
    if lease is not None:
        if not claim:
            raise UsageError("only with --claim (a lease is how long a claim lasts)",
                             where="--lease")
        from harness.todos import parse_lease

        seconds = parse_lease(lease)
    sess = h.session()
    found = next_ready(h.store, sess.id, claim=claim, actor=actor, lease=seconds)
    text, data = render_next(found, sess.name, claimed=claim)
    out(json.dumps(data, indent=2, ensure_ascii=False) if as_json else text)
    return 0 if found.todo is not None else 1


def heartbeat(h: Any, *, actor: str | None, as_json: bool) -> int:
    """``harness heartbeat``: renew the actor's leases in the session. Exit 0 while it
    holds one, 1 when it holds none (a lease it lost is said on stderr, once)."""
    from harness.agents.claims import claim_actor
    from harness.agents.leases import heartbeat as beat

    sess = h.session()
    found = beat(h.store, sess.id, sess.name, claim_actor(actor))
    if as_json:
        out(json.dumps(found.to_json(), indent=2, ensure_ascii=False))
    else:
        for line in found.lines():
            out(line)
    for line in found.refusals():
        note(f"refused: {line}")
    return 0 if found.held else 1


def hook(agent: str, *, db: str | None, session: str | None, actor: str | None,
         event: str | None = None, payload: str | None = None) -> int:
    """``harness hook AGENT``: the agent's hook payload on stdin (or as ``payload``),
    handed to the agent's registry row (:meth:`harness.agents.seam.Agent.hook`). Never
    fails the agent: any error is logged to ``<data dir>/logs/hooks.log`` and the hook
    exits 0."""

    def body() -> str | None:
        # The store may be away (a restart, a cut network): within the agent's time limit
        # the call goes to the spool instead, and the next call sends it
        # (harness/agents/spool.py).
        from harness.agents import spool
        from harness.agents.logfile import log

        text = payload if payload is not None else read_text(None, f"{agent} hook payload")
        call = spool.new_call(agent, text, db=db, session=session, actor=actor, event=event)
        return spool.deliver(call, hook_call, lambda line: log("hooks", line), note)

    try:
        never_fail(agent, body)
    finally:
        try:
            close()
        except Exception as exc:  # closing must not fail the agent either
            from harness.agents.logfile import log

            log("hooks", f"{agent}: closing the store: {exc}")
    return 0


def hook_call(call: dict[str, Any]) -> str | None:
    """One hook call (as :func:`harness.agents.spool.new_call` keeps it) against the
    store, through the agent's registry row: the agent's answer."""
    from harness.agents.registry import agent as agent_named

    agent, args = call["agent"], call["args"]
    db, session, event = args.get("db"), args.get("session"), args.get("event")
    name = args.get("actor") or agent
    name = name if name.startswith("agent:") else f"agent:{name}"
    plugin = agent_named(agent)
    data = parse_payload(call["payload"], f"{agent} hook payload",
                         empty="empty hook payload")

    def open_harness() -> Any:
        # The project's store is found from the project directory, wherever the agent
        # runs the hook from.
        return _harness(db, plugin.session_for(data, session), announce=False,
                        cwd=plugin.project_dir(data))

    try:
        return plugin.hook(data, open_harness, actor=name, event=event)
    finally:
        close()  # each attempt opens the store afresh


def never_fail(name: str, body: Callable[[], str | None]) -> None:
    """Run a hook body; print what it returns; on any error log it and carry on."""
    try:
        text = body()
    except Exception as exc:
        from harness.agents.logfile import log, log_path

        # Our own errors are one line; anything else is a bug, kept with its traceback.
        where = log("hooks", f"{name}: {exc}", None if isinstance(exc, KNOWN_ERRORS) else exc)
        note(f"harness hook {name}: {exc} (logged to {where or log_path('hooks')})")
        return
    if text:
        out(text)
