"""Each row of the README's exit codes, once, as a person meets it: 0 ok, 1 an error they
can act on, 2 usage, 3 a database or host out of reach, 4 a timeout, 130 Ctrl-C, 143 and
129 a `harness run` ended by SIGTERM or SIGHUP. Each error is one line on stderr."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runner.ownership import host_record
from pipeline.hosts.local import LocalExecutor
from pipeline.spec.models import HostSpec
from state.store import Store
from tests.conftest import ROOT, harness_subprocess, run_cli
from tests.tui.conftest import Campaign
from tests.tui.test_web import WebServer

TESTED = {0, 1, 2, 3, 4, 130, 143, 129}


def one_error_line(stderr: bytes | str) -> str:
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    assert "Traceback" not in text
    return lines[0]


def test_the_readme_names_the_codes_tested_here() -> None:
    readme = (ROOT / "README.md").read_text()
    sentence = readme[readme.index("Exit codes:"):]
    sentence = sentence[:sentence.index("errors are one")]
    assert {int(n) for n in re.findall(r"\b\d+\b", sentence)} == TESTED, sentence


def test_0_ok_1_actionable_2_usage_3_unreachable(tmp_path: Path) -> None:
    env = {"HARNESS_DB": str(tmp_path / "s.db")}
    assert harness_subprocess(["add", "a todo"], env=env).returncode == 0
    ok = harness_subprocess(["list"], env=env)
    assert ok.returncode == 0 and b"a todo" in ok.stdout, ok.stderr
    # a report to a folder that does not exist: the path is the user's to fix
    bad = harness_subprocess(["report", "--html", "/nonexistent/dir/x.html"], env=env)
    assert bad.returncode == 1
    assert one_error_line(bad.stderr) == ("error: /nonexistent/dir/x.html: cannot write the "
                                          "report (No such file or directory)")
    usage = harness_subprocess(["list", "--bogus"], env=env)
    assert usage.returncode == 2 and b"No such option '--bogus'" in usage.stderr
    down = harness_subprocess(["list"], env={"HARNESS_DB": "postgresql://u@127.0.0.1:1/x"})
    assert down.returncode == 3
    assert "127.0.0.1" in one_error_line(down.stderr)


@pytest.mark.sqlite
def test_4_a_host_that_does_not_answer_in_time(store: Store, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`harness cancel` on a run whose host answers no command: the host is this machine,
    where the shell is given `sleep` and a limit of a fraction of a second in place of
    the minute a real host gets (the timeout itself is the executor's own)."""
    host = HostSpec(name="local", workdir=str(tmp_path))
    sid = store.create_session("default", actor="human")
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=None, host="local", stage="train")
        tx.update_run(run.id, state="running", job={"key": "k-1", "host": host_record(host)})
    slow_shell = LocalExecutor._shell_env
    monkeypatch.setattr(LocalExecutor, "_shell", lambda self, script, timeout:
                        slow_shell(self, "exec sleep 10", {}, 0.3))
    r = run_cli(["cancel", f"r{run.id}"])
    assert r.code == 4
    assert one_error_line(r.err) == "error: local: no answer from the local shell in 0.3s"
    assert store.run(run.id)[1].state == "running"  # nothing recorded


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])
def test_130_ctrl_c_on_the_web_board(store: Store, db_path: Path, signum: int, code: int,
                                     default_stop_signals: None) -> None:
    sid = store.create_session("default", actor="human")
    server = WebServer(Campaign(store, sid, "default", db_path), "--no-token")
    server.banner()
    os.killpg(server.proc.pid, signum)
    server.proc.wait(timeout=60)
    time.sleep(0.2)  # the readers take the last lines
    assert server.proc.returncode == code, server.printed
    errors = [ln for ln in server.printed if ln.startswith("error: ")]
    assert len(errors) == 1 and "the board is no longer served" in errors[0], server.printed
    assert not any("Traceback" in ln for ln in server.printed)


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)],
                         ids=["sigterm", "sighup"])
def test_143_and_129_harness_run_ended_by_a_signal(tmp_path: Path, db_path: Path, signum: int,
                                                   code: int,
                                                   default_stop_signals: None) -> None:
    spec = tmp_path / "p.yaml"
    spec.write_text("pipeline: sleepy\nhosts: {local: {workdir: w}}\n"
                    "stages:\n  - {name: wait, host: local, run: sleep 60}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_DB": str(db_path)}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "--quiet", str(spec)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = Store.open(str(db_path))
    try:
        deadline = time.monotonic() + 60
        while not any(r.state == "running" for r in store.runs()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == code, err
        assert one_error_line(err).startswith(
            f"error: terminated ({signal.Signals(signum).name}): stopped watching")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for run in store.runs():  # the job was left running on purpose: stop it now
            if run.state == "running":
                run_cli(["--db", str(db_path), "cancel", f"r{run.id}"])
        store.close()
