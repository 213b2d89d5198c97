"""End to end, as a person uses it: `harness tui` in a real terminal (tmux), keys sent to
it, the screen read back, and the store checked."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.tui.conftest import Campaign

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None,
                                 reason="tmux is not installed (scripts/test installs it)")]


class Tmux:
    def __init__(self, tmp_path: Path):
        self.socket = f"harness-test-{os.getpid()}-{tmp_path.name}"

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-u", "-L", self.socket, *args], check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def start(self, command: str) -> None:
        # A detached session has no client to take its size from: give it one.
        self.run("-f", "/dev/null", "new-session", "-d", "-s", "tui", "-x", "140", "-y", "40",
                 command)

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "tui", *keys)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "tui")

    def alive(self) -> bool:
        return subprocess.run(["tmux", "-L", self.socket, "has-session", "-t", "tui"],
                              capture_output=True).returncode == 0

    def wait(self, condition: Callable[[str], bool], what: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if condition(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"the screen never showed {what}:\n{screen}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def row(screen: str, todo: str) -> str:
    return next((line for line in screen.splitlines() if f" {todo} " in line[:12]), "")


def harness_command(campaign: Campaign, *args: str) -> str:
    env = {"PYTHONPATH": str(ROOT), "HARNESS_CONFIG_DIR": os.environ["HARNESS_CONFIG_DIR"],
           "HARNESS_DATA_DIR": os.environ["HARNESS_DATA_DIR"], "LANG": "C.UTF-8",
           "TERM": "xterm-256color"}
    return " ".join([
        # COLUMNS/LINES from the test's own environment would override the pane's size.
        "cd", shlex.quote(str(ROOT)), "&&", "exec", "env", "-u", "COLUMNS", "-u", "LINES",
        *[f"{k}={shlex.quote(v)}" for k, v in env.items()],
        shlex.quote(sys.executable), "-m", "harness", "--db", shlex.quote(str(campaign.path)),
        "--session", shlex.quote(campaign.name), *args])


def test_reprioritise_and_mark_a_todo_in_a_real_terminal(campaign: Campaign,
                                                         tmp_path: Path) -> None:
    store, sid = campaign.store, campaign.session_id
    before = store.last_n(sid)
    command = harness_command(campaign, "tui")
    tmux = Tmux(tmp_path)
    try:
        tmux.start(command)
        tmux.wait(lambda s: "Pending (3)" in s and "6/11 done" in s, "the board")
        # Down twice: from t6 (in progress) to t9, then t11 (pending, medium).
        tmux.keys("j")
        tmux.wait(lambda s: "t9  ○ pending" in s, "t9's detail")
        tmux.keys("j")
        tmux.wait(lambda s: "t11  ○ pending" in s, "t11's detail")
        tmux.keys("+")
        screen = tmux.wait(lambda s: " H " in row(s, "t11"), "t11 raised to high")
        # High priority: now first in Pending.
        pending = screen.index("Pending (3)")
        assert screen.index(" t11 ", pending) < screen.index(" t9 ", pending)
        tmux.keys("d")
        screen = tmux.wait(lambda s: "✓ t11" in s and "7/11 done" in s, "t11 completed")
        assert "Completed (7)" in screen and "Pending (2)" in screen
        tmux.keys("q")
        deadline = time.monotonic() + 15
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not tmux.alive(), "q did not quit"
    finally:
        tmux.kill()

    events = store.events(sid, after_n=before)
    assert [(e.kind, e.todo_id, e.actor, e.payload) for e in events] == [
        ("todo.updated", 11, "human", {"changes": {"priority": ["medium", "high"]}}),
        ("todo.updated", 11, "human", {"changes": {"status": ["pending", "completed"]}}),
    ]
    assert store.todo(sid, 11).status == "completed"


def test_bare_harness_on_a_terminal_opens_the_board(campaign: Campaign, tmp_path: Path) -> None:
    tmux = Tmux(tmp_path)
    try:
        tmux.start(harness_command(campaign))
        tmux.wait(lambda s: "Pending (3)" in s and "session kimi-k25-eagle3" in s, "the board")
        tmux.keys("q")
        deadline = time.monotonic() + 15
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not tmux.alive()
    finally:
        tmux.kill()
