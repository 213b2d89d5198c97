"""Snapshots of the screens people look at, on the fixed-time campaign session.

Update after an intended change with ``pytest tests/tui/test_snapshots.py
--snapshot-update`` and look at the SVGs in ``__snapshots__/`` before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.tui.conftest import Campaign
from tui.app import HarnessApp
from tui.widgets.board import Board
from tui.widgets.verification import VerificationPanel

SIZE = (140, 40)


def ready(app: HarnessApp, *keys: str, select: int | None = None
          ) -> Callable[[Any], Awaitable[None]]:
    async def run_before(pilot: Any) -> None:
        await app.settled()
        if select is not None:
            app.screen.query_one(Board).select(select)
            await pilot.pause()  # the selection reaches the store thread...
            await app.settled()  # ...and its detail comes back
        for key in keys:
            await pilot.press(key)
            await app.settled()
        await pilot.pause()
    return run_before


def test_board(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()
    assert snap_compare(app, terminal_size=SIZE, run_before=ready(app))


def test_detail_of_a_blocked_todo(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()
    assert snap_compare(app, terminal_size=SIZE, run_before=ready(app, select=8))


def test_live_log_tail(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()
    assert snap_compare(app, terminal_size=SIZE, run_before=ready(app, "2", select=6))


def test_verification_panel(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()
    assert snap_compare(app, terminal_size=SIZE, run_before=ready(app, "3", select=8))


def test_verification_earlier_attempt(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()

    async def run_before(pilot: Any) -> None:
        await ready(app, "3", select=8)(pilot)
        app.screen.query_one(VerificationPanel).choose(1)  # the first attempt (no d2t)
        await pilot.pause()
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_replay(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()
    # Into replay at the last event, then back to the status change before the block.
    assert snap_compare(app, terminal_size=SIZE,
                        run_before=ready(app, "r", "left_square_bracket",
                                         "left_square_bracket", select=8))


SMALL = (80, 24)  # the smallest terminal the TUI is laid out for


def test_narrow_terminal(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()
    assert snap_compare(app, terminal_size=SMALL, run_before=ready(app, select=9))


def test_small_terminal_verify_todo(snap_compare: Any, campaign: Campaign) -> None:
    """The blocked verify todo at 80x24: its figures on the board row, its verdict and
    gate in the Detail tab, Help and Quit in the footer."""
    app = campaign.app()
    assert snap_compare(app, terminal_size=SMALL, run_before=ready(app, select=8))


def test_small_terminal_verification_tab(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()
    assert snap_compare(app, terminal_size=SMALL, run_before=ready(app, "3", select=8))


def test_small_terminal_help(snap_compare: Any, campaign: Campaign,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    # the help names the config file: the same path on every run
    monkeypatch.setenv("HARNESS_CONFIG_DIR", "/home/me/.config/todo-harness")
    app = campaign.app()
    assert snap_compare(app, terminal_size=SMALL,
                        run_before=ready(app, "question_mark", select=8))


def test_small_terminal_training_chart(snap_compare: Any, campaign: Campaign) -> None:
    """The running training at 80x24: its loss curve in the Detail tab."""
    app = campaign.app()
    assert snap_compare(app, terminal_size=SMALL, run_before=ready(app, select=6))


def test_chart_screen(snap_compare: Any, campaign: Campaign) -> None:
    """Every chart of the training todo, both runs overlaid (c)."""
    app = campaign.app()
    assert snap_compare(app, terminal_size=SIZE, run_before=ready(app, "c", select=6))


def test_small_terminal_chart_screen(snap_compare: Any, campaign: Campaign) -> None:
    app = campaign.app()
    assert snap_compare(app, terminal_size=SMALL, run_before=ready(app, "c", select=6))
