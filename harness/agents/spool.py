"""The hooks' spool: an agent's hook call that cannot reach the store in time is kept in a
local file, and the next hook call that reaches the store sends it first, in order.

An agent waits for its hook (Claude Code 60 s by default, Gemini CLI 60 s, GitHub Copilot
CLI the 30 s our installer sets), and a hook that runs past that is killed, its payload
lost. So a hook retries an unreachable store for :data:`HOOK_BUDGET_S` at most (less when
the store's own budget is less, ``state/retry.py``), then appends the call (its
command line, payload, working directory, the few environment variables that choose
the store and session, and its operation id) to ``<data dir>/spool/hooks.jsonl``,
tells the agent so in one line, and returns.

Every hook call first sends what the spool holds, oldest first, each through the same
hook code under its own operation id (so a call whose writes had partly landed before
it gave up is not written twice), removing each once it is through. It stops at the
first that meets the store unreachable again (the rest wait, and the new call joins
them at the end: order is kept). A spooled call the store refuses for good (bad input,
say) is logged and dropped, as a live hook's error is. ``harness doctor`` says when the
spool is not empty.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.paths import data_dir
from state.errors import StoreUnreachable

HOOK_BUDGET_S = 10.0
# The environment a hook's store and session are chosen by (harness.paths, the hooks).
ENV_KEPT = ("HARNESS_DB", "HARNESS_SESSION", "CLAUDE_CODE_TASK_LIST_ID", "CLAUDE_PROJECT_DIR")

Call = dict[str, Any]


def spool_path() -> Path:
    return data_dir() / "spool" / "hooks.jsonl"


def new_call(agent: str, payload: str, **args: Any) -> Call:
    """What a hook call is, kept whole so that it can run again later."""
    from state.retry import new_id
    from state.values import utcnow

    return {"agent": agent, "payload": payload, "args": args, "cwd": os.getcwd(),
            "env": {k: os.environ[k] for k in ENV_KEPT if k in os.environ},
            "op": new_id(), "at": utcnow()}


@contextmanager
def _locked() -> Iterator[Path]:
    """The spool file, with an exclusive lock held (hooks of several agents run at once)."""
    import fcntl

    path = spool_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield path
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(path: Path) -> list[Call]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    calls = []
    for line in lines:
        try:
            calls.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash mid-append: nothing to send
    return calls


def _write(path: Path, calls: list[Call]) -> None:
    if not calls:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for call in calls:
            fh.write(json.dumps(call, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def waiting() -> list[Call]:
    """The calls the spool holds, oldest first."""
    return _read(spool_path())


@contextmanager
def _as_recorded(call: Call) -> Iterator[None]:
    """Run a spooled call where and as it was made: its directory and environment."""
    before = {k: os.environ.get(k) for k in ENV_KEPT}
    here = os.getcwd()
    try:
        for k in ENV_KEPT:
            os.environ.pop(k, None)
        os.environ.update(call.get("env") or {})
        try:
            os.chdir(call["cwd"])
        except OSError:
            pass  # gone since: the payload's own directory still says where it ran
        yield
    finally:
        os.chdir(here)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def deliver(call: Call, handle: Callable[[Call], str | None], log: Callable[[str], None],
            tell: Callable[[str], None]) -> str | None:
    """Send what the spool holds, then this call; the text to answer the agent with.

    ``handle`` runs one call against the store (inside an operation with the call's id,
    :func:`state.retry.run`); ``log`` records a spooled call dropped for an error;
    ``tell`` says to the agent, in one line, that this call was spooled."""
    from state import retry

    def attempt(c: Call, replay: bool) -> str | None:
        return retry.run(lambda: handle(c), op_id=c["op"], replay=replay,
                         cap_s=HOOK_BUDGET_S, what=f"the {c['agent']} hook's update")

    if not spool_path().exists():  # the everyday case: no lock, no file
        try:
            return attempt(call, False)
        except StoreUnreachable as exc:
            why = exc.message.split(";")[0]
        with _locked() as path:
            calls = [*_read(path), call]
            _write(path, calls)
        tell(_spooled(why, path, len(calls)))
        return None
    with _locked() as path:
        calls = _read(path)
        while calls:
            try:
                with _as_recorded(calls[0]):
                    attempt(calls[0], True)
            except StoreUnreachable:
                break
            except Exception as exc:  # refused for good: as a live hook's error, logged
                log(f"{calls[0]['agent']}: a spooled call from {calls[0].get('at')} was "
                    f"dropped: {exc}")
            calls.pop(0)
            _write(path, calls)
        if not calls:
            try:
                return attempt(call, False)
            except StoreUnreachable as exc:
                why = exc.message.split(";")[0]
        else:
            why = "the calls spooled before this one could not be sent yet"
        calls.append(call)
        _write(path, calls)
    tell(_spooled(why, path, len(calls)))
    return None


def _spooled(why: str, path: Path, count: int) -> str:
    return (f"harness: the store is unreachable ({why}); this update is kept in {path} "
            f"({count} waiting) and is sent by the next hook call that reaches it")


def doctor_line() -> str | None:
    """What ``harness doctor`` says of the spool: nothing when it is empty."""
    calls = waiting()
    if not calls:
        return None
    return (f"spool: {len(calls)} hook call(s) since {calls[0].get('at')} wait in "
            f"{spool_path()} (the store was unreachable); the next hook call that reaches "
            "the store sends them")


__all__ = ["HOOK_BUDGET_S", "deliver", "doctor_line", "new_call", "spool_path", "waiting"]
