"""An exception nothing in the TUI handles ends it with one line and a non-zero exit, the
traceback in the log file that line names: from a key's handler, from the store thread, and
end to end through `harness tui` in a real terminal."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from harness.paths import data_dir
from tests.tui.conftest import Campaign
from tests.tui.test_tmux import Tmux, harness_command
from tui.screens.board import BoardScreen
from tui.store_io import StoreIO

pytestmark = pytest.mark.anyio


def _boom(*_args: object) -> None:
    raise RuntimeError("boom: an unforeseen state\nsecond line")


def tui_log() -> Path:
    return data_dir() / "logs" / "tui.log"


async def test_an_exception_in_a_key_handler_ends_the_app_with_one_line(
        campaign: Campaign, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BoardScreen, "action_help", _boom)
    app = campaign.app()
    with pytest.raises(RuntimeError):  # the pilot raises what ended the app
        async with app.run_test(size=(80, 24)) as pilot:
            await app.settled()
            await pilot.press("question_mark")
            await pilot.pause()
    assert app.return_code == 1
    assert app.crash is not None
    assert app.crash.message() == ("the TUI stopped on an unexpected error "
                                   "(RuntimeError: boom: an unforeseen state)")
    assert app.crash.log == tui_log()
    assert f"its traceback is in {tui_log()}" in app.crash.hint()
    logged = tui_log().read_text()
    assert "Traceback (most recent call last)" in logged and "in _boom" in logged
    assert not app._exit_renderables  # Textual's own traceback is not printed on exit


async def test_an_exception_in_the_store_thread_ends_the_app(
        campaign: Campaign, monkeypatch: pytest.MonkeyPatch) -> None:
    app = campaign.app()
    with pytest.raises(Exception):  # noqa: B017 - Textual's WorkerFailed around ours
        async with app.run_test(size=(80, 24)) as pilot:
            await app.settled()
            monkeypatch.setattr(StoreIO, "_refresh", lambda self, watch: 1 / 0)
            for _ in range(200):
                if app.return_code is not None:
                    break
                await pilot.pause(0.05)
    assert app.return_code == 1
    assert app.crash is not None
    assert app.crash.summary == "ZeroDivisionError: division by zero"  # not the wrapper
    assert "ZeroDivisionError" in tui_log().read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None,
                    reason="tmux is not installed (scripts/test installs it)")
def test_harness_tui_reports_a_crash_in_one_line_and_exits_1(campaign: Campaign,
                                                             tmp_path: Path) -> None:
    # `harness tui` as typed, but with a key handler that raises, put in before the CLI runs.
    inject = ("import sys; from tui.screens.board import BoardScreen; "
              "BoardScreen.action_help = lambda self: 1 / 0; "
              "from harness.cli.main import main; sys.argv[0] = 'harness'; main()")
    command = harness_command(campaign, "tui").replace(
        f"{shlex.quote(sys.executable)} -m harness",
        f"{shlex.quote(sys.executable)} -c {shlex.quote(inject)}")
    assert inject[:20] in command
    command = command.replace("exec env", "env")
    tmux = Tmux(tmp_path)
    try:
        tmux.start(f"{command}; echo \"harness exited with $?\"; sleep 60")
        tmux.wait(lambda s: "Pending (3)" in s, "the board")
        tmux.keys("?")
        screen = tmux.wait(lambda s: "harness exited with" in s, "the exit code")
    finally:
        tmux.kill()
    lines = [ln for ln in screen.splitlines() if ln.strip()]
    assert lines[-1] == "harness exited with 1", screen
    # one line (the terminal may wrap it), no traceback
    error = " ".join(ln.strip() for ln in lines[:-1])
    assert error.startswith("error: the TUI stopped on an unexpected error "
                            "(ZeroDivisionError: division by zero)"), screen
    assert "Traceback" not in screen and "╭" not in screen
    log = Path(os.environ["HARNESS_DATA_DIR"]) / "logs" / "tui.log"
    assert f"its traceback is in {log}" in "".join(ln.strip() for ln in lines[:-1]) \
        or f"its traceback is in {log}" in error
    assert "ZeroDivisionError" in log.read_text()
