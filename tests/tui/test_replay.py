"""Replay: the board as of event N, stepping, jumping between status changes, read-only,
and forking (harness.replay.fork, from the replay issue)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from state.store import Store
from tests.conftest import ROOT, run_cli
from tests.tui.conftest import Campaign
from tui.app import HarnessApp
from tui.screens.board import BoardScreen
from tui.screens.replay import ReplayScreen
from tui.store_io import is_status_change
from tui.widgets.board import Board

pytestmark = pytest.mark.anyio


def board_matches(app: HarnessApp, store: Store, sid: int, n: int) -> None:
    """The replay board shows exactly the store's state at event n."""
    view = app.replay_screen.view
    assert view is not None and view.n == n
    expected = store.state_at(sid, n).todos
    board = app.screen.query_one(Board)
    assert {num: (t.status, t.priority, t.content) for num, t in expected.items()} == \
        {num: (board.todo(num).status, board.todo(num).priority, board.todo(num).content)
         for num in expected}
    assert sorted(r for r in board.rows if isinstance(r, int)) == sorted(expected)


async def press(app: HarnessApp, pilot, *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await app.settled()
    await pilot.pause()


async def test_stepping_through_the_session(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    total = store.last_n(sid)
    status_changes = [e.n for e in store.events(sid) if is_status_change(e)]
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        await press(app, pilot, "r")
        assert isinstance(app.screen, ReplayScreen)
        board_matches(app, store, sid, total)
        await press(app, pilot, "left", "left")
        board_matches(app, store, sid, total - 2)
        await press(app, pilot, "home")
        board_matches(app, store, sid, 1)
        assert app.replay_screen.view.event.kind == "session.created"
        await press(app, pilot, "right")
        board_matches(app, store, sid, 2)
        await press(app, pilot, "right_square_bracket")
        board_matches(app, store, sid, status_changes[0])
        await press(app, pilot, "right_square_bracket")
        board_matches(app, store, sid, status_changes[1])
        await press(app, pilot, "end")
        board_matches(app, store, sid, total)
        await press(app, pilot, "left_square_bracket")
        board_matches(app, store, sid, status_changes[-1])
        await press(app, pilot, "left_square_bracket")
        board_matches(app, store, sid, status_changes[-2])
        await press(app, pilot, "escape")
        assert isinstance(app.screen, BoardScreen)


async def test_replay_is_read_only(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    before = store.last_n(sid)
    app = campaign.app(replay=True)
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen)
        await press(app, pilot, "left")
        for key in ("s", "d", "x", "u", "plus", "minus", "K", "J"):
            await press(app, pilot, key)
        # The palette offers only replay's own actions here.
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Mark the selected todo completed" not in titles
        assert "The next status change" in titles
    assert store.last_n(sid) == before


async def test_selecting_in_replay_shows_history_up_to_n(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        await press(app, pilot, "r")
        n = app.replay_screen.view.n
        await press(app, pilot, *["left"] * 10)
        app.screen.query_one(Board).select(8)
        await pilot.pause()
        await app.settled()
        await pilot.pause()
        detail = app.replay_screen.view.detail
        assert detail.todo is not None and detail.todo.num == 8
        assert detail.history and max(e.n for e in detail.history) <= n - 10
        assert not detail.live


async def test_timeline_grows_while_the_session_goes_on(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        await press(app, pilot, "r", "left")
        total = app.replay_screen.view.total
        with store.write(sid, "agent:claude") as tx:
            tx.update_todo(9, status="in_progress")
        for _ in range(200):
            await pilot.pause(0.025)
            if app.replay_screen.view.total == total + 1:
                break
        assert app.replay_screen.view.total == total + 1
        assert app.replay_screen.view.n == total - 1  # still where the person was


def _fork_available() -> bool:
    try:
        return hasattr(importlib.import_module("harness.replay"), "fork")
    except ImportError:
        return False


@pytest.mark.skipif(not _fork_available(),
                    reason="harness.replay.fork (the replay issue) is not merged yet")
async def test_fork_from_here(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        await press(app, pilot, "r", "home", "right_square_bracket")
        n = app.replay_screen.view.n
        await pilot.press("f")
        await pilot.pause()
        from textual.widgets import Input

        app.screen.query_one(Input).value = "what-if"
        await pilot.press("enter")
        await app.settled()
        await pilot.pause()
        await app.settled()
        await pilot.pause()
        forked = store.session_by_name("what-if")
        assert forked is not None and forked.parent_id == sid and forked.fork_n == n
        assert app.session_id == forked.id
        assert isinstance(app.screen, BoardScreen)
        board = app.screen.query_one(Board)
        assert {num: t.status for num, t in store.state_at(sid, n).todos.items()} == \
            {num: board.todo(num).status for num in store.state_at(sid, n).todos}


EXAMPLE = ROOT / "examples" / "kimi-k25-campaign.jsonl"


@pytest.mark.skipif(not EXAMPLE.exists(),
                    reason="examples/kimi-k25-campaign.jsonl (the replay issue) not merged yet")
async def test_example_campaign_replays(db_path: Path) -> None:
    result = run_cli(["import", str(EXAMPLE), "--session", "kimi"])
    assert result.code == 0, result.err
    store = Store.open(str(db_path))
    try:
        sid = store.session_by_name("kimi").id
        total = store.last_n(sid)
        app = HarnessApp(store, sid, replay=True)
        async with app.run_test(size=(140, 40)) as pilot:
            await app.settled()
            await pilot.pause()
            board_matches(app, store, sid, total)
            await press(app, pilot, "home", "right_square_bracket")
            first_change = next(e.n for e in store.events(sid) if is_status_change(e))
            board_matches(app, store, sid, first_change)
    finally:
        store.close()
