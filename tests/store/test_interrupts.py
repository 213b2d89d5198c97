"""Ctrl-C in the middle of a store write: the write is rolled back or committed whole, and
the next write of the same process goes through at once (state/interrupts.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from state.interrupts import InterruptGate, TerminateRequested, stop_signals_raise

ROOT = Path(__file__).resolve().parents[2]
CHILD = ROOT / "tests" / "data" / "interrupt_writes.py"


@pytest.mark.parametrize("sig,trials", [("INT", 150), ("TERM", 60)])
def test_ctrl_c_during_writes_never_leaves_the_lock_taken(db_url: str, sig: str, trials: int,
                                                          default_stop_signals: None) -> None:
    # Before the gate, about one trial in ten leaked the writer lock and the next write
    # waited out the busy timeout; 150 trials made a miss all but certain.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_BUSY_TIMEOUT_MS": "300"}
    proc = subprocess.run([sys.executable, str(CHILD), db_url, str(trials), sig], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["interrupted"] == trials
    assert report["failures"] == []
    assert report["miscounted"] == []


def test_gate_defers_sigint_until_opened() -> None:
    gate = InterruptGate()
    gate.close()
    os.kill(os.getpid(), signal.SIGINT)
    raised = False
    try:
        gate.open()
    except KeyboardInterrupt:
        raised = True
    assert raised
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_gate_leaves_other_handlers_and_threads_alone() -> None:
    seen: list[int] = []

    def mine(signum, frame):  # type: ignore[no-untyped-def]
        seen.append(signum)

    previous = signal.signal(signal.SIGINT, mine)
    try:
        gate = InterruptGate()
        gate.close()
        assert signal.getsignal(signal.SIGINT) is mine
        os.kill(os.getpid(), signal.SIGINT)
        gate.open()
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)

    in_thread: list[object] = []

    def worker() -> None:
        g = InterruptGate()
        g.close()
        in_thread.append(signal.getsignal(signal.SIGINT))
        g.open()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert in_thread == [signal.default_int_handler]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_gate_defers_stop_signals_where_they_raise(signum: int,
                                                   default_stop_signals: None) -> None:
    before = signal.getsignal(signum)
    with stop_signals_raise():
        gate = InterruptGate()
        gate.close()
        os.kill(os.getpid(), signum)
        with pytest.raises(TerminateRequested) as info:
            gate.open()
    assert info.value.signum == signum
    assert signal.getsignal(signum) is before


def test_an_ignored_sighup_stays_ignored() -> None:
    # `nohup harness run ...`: the person asked for SIGHUP to be ignored.
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stop_signals_raise():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, previous)
