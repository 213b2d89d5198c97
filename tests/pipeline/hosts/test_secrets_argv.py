"""Secrets never reach a process's command line on this machine.

Any user can read any process's argv in ``/proc/PID/cmdline``; a process's environment is
readable by its own user only. These tests read the real ``/proc`` of the shells the local
executor starts, while they run.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from pipeline.hosts.local import LocalExecutor
from pipeline.spec.models import HostSpec
from tests.pipeline.conftest import wait_for

SECRET = "hf_n0t_in_argv_3141592"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_command_gets_its_secret_through_the_environment(tmp_path: Path) -> None:
    ex = LocalExecutor(HostSpec(workdir=str(tmp_path / "work")))
    # The script's own shell prints its command line (upper-cased, or the executor's
    # redaction of its output would hide what we look for), then the value it was given.
    r = ex.run('tr "\\0\\na-z" "  A-Z" < /proc/$$/cmdline; echo; echo "${HF_TOKEN#hf_}"',
               env={"HF_TOKEN": SECRET})
    cmdline, said = r.stdout.splitlines()[:2]
    assert "/PROC/$$/CMDLINE" in cmdline  # it is the shell that ran the script
    assert SECRET.upper() not in cmdline
    assert said == SECRET.removeprefix("hf_")  # and the value did arrive


def test_a_detached_job_is_launched_without_its_secret_in_any_argv(tmp_path: Path) -> None:
    """A ``setsid`` first on PATH records the command line of the shell launching the job
    (its parent, alive until the job has recorded its pid), then runs the real one."""
    spy = tmp_path / "spy"
    spy.mkdir()
    seen = tmp_path / "launcher-cmdline"
    real = next(p for d in os.environ["PATH"].split(os.pathsep)
                if (p := Path(d) / "setsid").is_file())
    (spy / "setsid").write_text(f'#!/bin/sh\ntr "\\0" " " < /proc/$PPID/cmdline > {seen}\n'
                                f'exec {real} "$@"\n')
    (spy / "setsid").chmod(stat.S_IRWXU)
    ex = LocalExecutor(HostSpec(workdir=str(tmp_path / "work")))
    handle = ex.start_detached(
        "job1", ["sh", "-c", 'echo "${HF_TOKEN#hf_}"'],
        env={"PATH": f"{spy}{os.pathsep}{os.environ['PATH']}", "HF_TOKEN": SECRET})
    assert wait_for(ex, handle).state == "succeeded"
    launcher = seen.read_text()
    assert "nohup sh ./job.sh" in launcher  # the spy saw the launching shell
    assert SECRET not in launcher
    assert ex.tail(handle)[0] == SECRET.removeprefix("hf_").encode() + b"\n"
    for name in ("job.sh", "cmd"):  # nor is it written to the run directory
        assert SECRET not in (Path(handle.run_dir) / name).read_text()
