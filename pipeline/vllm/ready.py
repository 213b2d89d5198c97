"""Waiting for a server to answer: ``/health``, then ``/v1/models``, while its log grows.

The serve action waits here for the server it started (:func:`wait_ready`). A serve stage
with ``wait: false`` does not: it starts the server and ends, so that several servers
load at once, and the harness waits before the first stage that needs them, by running
this module on their host::

    python -m pipeline.vllm.ready '[{"name": "serve_k3", "url": "http://127.0.0.1:8003",
                                     "pid": 4242, "start_time": "123", "log": "/.../server.log",
                                     "deadline": 1733300000.0, "stop_grace": 10}]'

It polls every listed server until each answers, dies, or passes its deadline (its serve
stage's start plus its ``health_timeout``, on the host's clock), and prints one JSON line
per server as it resolves: ``{"name", "ready": true, "model", "startup_s",
"startup_phases", "notes"}``, or ``{"name", "ready": false, "error", "stopped"}`` after
stopping the failed server's process group (the reason picked from its log by
:func:`pipeline.vllm.server.error_line`).

Standard library only: it runs on bare GPU hosts.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.vllm.openai_client import get
from pipeline.vllm.schedule import PIECEWISE_OVERRIDE
from pipeline.vllm.server import error_line, startup_phases
from pipeline.vllm.service import group_members, process_start_time, stop_group

__all__ = ["LogPump", "NotReady", "log_notes", "main", "poll_once", "settle", "wait_ready"]


class NotReady(Exception):
    """The server died during start or did not answer in time; the message says why."""


class LogPump:
    """Reads a server's log file as it grows; keeps its lines, and copies them to
    ``echo`` (stdout, which the runner streams into the store) when given."""

    def __init__(self, path: Path, offset: int = 0,
                 echo: Callable[[str], None] | None = None):
        self.path = path
        self.offset = offset
        self.partial = b""
        self.lines: list[str] = []
        self.echo = echo

    def pump(self, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        if final and self.partial:
            complete.append(self.partial)
            self.partial = b""
        for raw in complete:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            self.lines.append(line)
            if self.echo is not None:
                self.echo(line)


def log_notes(lines: list[str]) -> list[str]:
    """What the server's log says about how it runs that a reader of the figures must know:
    vLLM switching to piecewise CUDA graphs for a speculation schedule."""
    notes = []
    for line in lines:
        m = PIECEWISE_OVERRIDE.search(line)
        if m:
            notes.append(f"vLLM switched cudagraph_mode from {m.group(1)} to PIECEWISE "
                         "for the speculation schedule (the V1 model runner)")
    return list(dict.fromkeys(notes))


def poll_once(url: str) -> tuple[str | None, str]:
    """One look: (the first model /v1/models lists, or None; what was seen)."""
    health = get(f"{url}/health", timeout=2.0)
    if not health.ok:
        return None, f"/health: {health.describe()}"
    models = get(f"{url}/v1/models", timeout=5.0)
    if not models.ok:
        return None, f"/v1/models: {models.describe()}"
    try:
        ids = [m["id"] for m in models.json().get("data") or []]
    except (ValueError, TypeError, KeyError, AttributeError):
        ids = []
    return (str(ids[0]), "ready") if ids else (None, "/v1/models lists no model")


def _dead_reason(pump: LogPump, how: str) -> str:
    pump.pump(final=True)
    reason = error_line(pump.lines) or "(the log is empty)"
    return f"the server {how} during start: {reason}"


def _late_reason(pump: LogPump, timeout: float, last: str) -> str:
    pump.pump(final=True)
    tail = next((ln.strip() for ln in reversed(pump.lines) if ln.strip()), "(empty)")
    return (f"the server did not become healthy within {timeout:g}s (last {last}); its last "
            f"log line: {tail}")


def wait_ready(url: str, exited: Callable[[], str | None], pump: LogPump,
               timeout: float) -> str:
    """Poll until /health and /v1/models answer; return the model. ``exited()`` says how
    the server ended (``exited with code 1``), or None while it runs. Raises
    :class:`NotReady` with the log's reason."""
    deadline = time.monotonic() + timeout
    while True:
        pump.pump()
        how = exited()
        if how is not None:
            raise NotReady(_dead_reason(pump, how))
        model, last = poll_once(url)
        if model is not None:
            return model
        if time.monotonic() >= deadline:
            raise NotReady(_late_reason(pump, timeout, last))
        time.sleep(0.25)


def settle(exited: Callable[[], str | None], pump: LogPump, seconds: float = 1.0) -> None:
    """For a server not waited for (``wait: false``): only see that it does not die at once
    (a bad argument, a missing executable), for ``seconds``; :class:`NotReady` if it does."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pump.pump()
        how = exited()
        if how is not None:
            raise NotReady(_dead_reason(pump, how))
        time.sleep(0.1)


def _gone(pid: int, pgid: int, start_time: str | None) -> Callable[[], str | None]:
    """A server that is not our child: gone when its leader is (or another process took
    its pid), or when nothing but zombies is left in its group."""
    def exited() -> str | None:
        now = process_start_time(pid)
        mine = now is not None and (start_time is None or now == start_time)
        return None if mine and group_members(pgid) else "exited"
    return exited


def _wait_all(servers: list[dict[str, Any]]) -> None:
    """Every listed server at once, each to its own deadline; a line per server."""
    pending = []
    for s in servers:
        pump = LogPump(Path(s["log"])) if s.get("log") else LogPump(Path("/nonexistent"))
        pending.append((s, pump, _gone(int(s["pid"]), int(s["pgid"]), s.get("start_time")),
                        None))
    while pending:
        left = []
        for s, pump, exited, last in pending:
            pump.pump()
            answer: dict[str, Any] | None = None
            how = exited()
            if how is not None:
                answer = {"ready": False, "error": _dead_reason(pump, how)}
            else:
                model, last = poll_once(s["url"])
                if model is not None:
                    pump.pump(final=True)
                    started = s.get("started_at")
                    answer = {"ready": True, "model": model,
                              "startup_s": None if started is None else
                              round(time.time() - float(started), 3),
                              "startup_phases": startup_phases(pump.lines),
                              "notes": log_notes(pump.lines)}
                elif time.time() >= float(s["deadline"]):
                    answer = {"ready": False, "error": _late_reason(
                        pump, float(s.get("health_timeout") or 0), last)}
            if answer is None:
                left.append((s, pump, exited, last))
                continue
            if not answer["ready"]:
                answer["stopped"] = stop_group(int(s["pgid"]), float(s.get("stop_grace", 10)),
                                               s.get("start_time"))
            print(json.dumps({"name": s["name"], **answer}), flush=True)
        pending = left
        if pending:
            time.sleep(0.25)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        servers = json.loads(args[0]) if args else None
        if not isinstance(servers, list):
            raise ValueError("expected a JSON list of servers")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        _wait_all(servers)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
