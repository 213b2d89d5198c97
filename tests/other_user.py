"""A second, unprivileged user on this machine, watching what the harness leaves in view.

Campaigns run on shared GPU boxes and cluster login nodes, where any other user can run
``ps`` and read every ``/proc/PID/cmdline`` (and the ``environ`` of their own processes).
``OtherUser`` is such a user: ``harness-spy``, created with ``useradd`` (a system user
with no home and no login shell, left in place: concurrent test processes may share it),
so the fixture needs root and skips, saying so, without it.

:meth:`OtherUser.watch` starts a watcher as that user: until stopped it reads, again and
again, every ``/proc/*/cmdline`` and ``/proc/*/environ`` it is allowed to read and the
output of ``ps -ef``, and reports where a needle (the secret) appeared and whether it saw
a marker (proof that it could see the job at all). The needles reach it on its standard
input, never its own command line, or it would find itself.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

USER = "harness-spy"
PYTHON = shutil.which("python3", path="/usr/bin:/usr/local/bin:/bin")

# Standard library only, run by the system python: the spy may not read the project's venv.
_WATCHER = r"""
import json, os, subprocess, sys, threading
needles = json.loads(sys.stdin.readline())
secret, marker = needles["secret"].encode(), needles["marker"].encode()
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
report = {"hits": [], "passes": 0, "cmdlines": 0, "environs": 0, "ps_runs": 0,
          "saw_marker": False}
def look(where, data):
    if secret in data and len(report["hits"]) < 20:
        report["hits"].append(where + ": " + data.replace(b"\0", b" ")[:300].decode("utf-8", "replace"))
print("ready", flush=True)
while not stop.is_set() or report["passes"] < 2:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():  # its own processes too: their environ proves it reads one
            continue
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            if name == "cmdline":
                report["cmdlines"] += 1
                report["saw_marker"] = report["saw_marker"] or marker in data
            else:
                report["environs"] += 1
            look(f"/proc/{pid}/{name}", data)
    if report["passes"] % 4 == 0:
        ps = subprocess.run(["ps", "-ef"], capture_output=True).stdout
        report["ps_runs"] += 1
        report["saw_marker"] = report["saw_marker"] or marker in ps
        look("ps -ef", ps)
    report["passes"] += 1
print(json.dumps(report), flush=True)
"""


@dataclass(frozen=True)
class Report:
    """What the other user saw while it watched."""

    hits: list[str]        # where the secret appeared (empty: nowhere)
    passes: int            # full sweeps of /proc
    cmdlines: int          # command lines read
    environs: int          # environments read (its own processes' only)
    ps_runs: int
    saw_marker: bool       # it could see the job's own command line


class Watcher:
    def __init__(self, proc: subprocess.Popen[str]):
        self.proc = proc

    def stop(self) -> Report:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        line = self.proc.stdout.readline()
        self.proc.wait(30)
        err = self.proc.stderr.read() if self.proc.stderr else ""
        assert line, f"the watcher said nothing: {err}"
        return Report(**json.loads(line))


@dataclass(frozen=True)
class OtherUser:
    name: str
    uid: int
    gid: int

    def _popen(self, argv: Sequence[str], env: Mapping[str, str] | None,
               **kw: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(list(argv), user=self.uid, group=self.gid, extra_groups=[],
                                cwd="/", text=True, env={"PATH": "/usr/bin:/bin",
                                                         **(env or {})}, **kw)

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        """A command as this user; its stdout and stderr together."""
        proc = self._popen(argv, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = proc.communicate(timeout=60)
        return f"$ {' '.join(argv)}  (exit {proc.returncode})\n{out}"

    def watch(self, secret: str, marker: str) -> Watcher:
        """Start watching; returns once the first sweep is about to begin."""
        assert PYTHON is not None
        proc = self._popen([PYTHON, "-c", _WATCHER], None, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"secret": secret, "marker": marker}) + "\n")
        proc.stdin.flush()
        ready = proc.stdout.readline().strip()
        assert ready == "ready", f"the watcher did not start: {proc.stderr and proc.stderr.read()}"
        return Watcher(proc)


def _ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pass
    r = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                        "--shell", "/usr/sbin/nologin", USER], capture_output=True, text=True)
    for _ in range(50):  # a concurrent test process may be creating it at the same time
        try:
            return pwd.getpwnam(USER)
        except KeyError:
            time.sleep(0.1)
    raise RuntimeError(f"useradd {USER} failed: {' '.join(r.stderr.split())}")


@pytest.fixture(scope="session")
def other_user() -> Iterator[OtherUser]:
    """An unprivileged second user of this machine; skips (loudly) unless run as root."""
    if os.geteuid() != 0:
        pytest.skip("!!! OTHER-USER TESTS SKIPPED: creating a second user (useradd) needs "
                    "root")
    if PYTHON is None or not shutil.which("ps"):
        pytest.skip("!!! OTHER-USER TESTS SKIPPED: need /usr/bin/python3 and ps (procps)")
    try:
        entry = _ensure_user()
    except (OSError, RuntimeError) as exc:
        pytest.skip(f"!!! OTHER-USER TESTS SKIPPED: {exc}")
    yield OtherUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
