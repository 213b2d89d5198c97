"""Changes made by other processes appear on the board, in place, with the cursor kept."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import harness_subprocess
from tests.tui.conftest import Campaign, wait_until
from tui.app import POLL_INTERVAL
from tui.widgets.board import Board
from tui.widgets.header import SessionHeader

pytestmark = pytest.mark.anyio


async def test_another_process_write_appears_with_cursor_and_scroll_kept(
        campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    with store.write(sid, "agent:claude") as tx:
        for i in range(60):
            tx.create_todo(f"follow-up {i}", priority="low")  # t13..t72, pending, low
    app = campaign.app()
    async with app.run_test(size=(100, 24)) as pilot:
        await app.settled()
        board = app.screen.query_one(Board)
        board.select(40)  # far enough down that the board has scrolled
        await pilot.pause()
        assert board.scroll_y > 0
        screen_line = board.cursor - round(board.scroll_y)
        assert board.selected == 40

        # Another process marks t9 done: t9 leaves Pending (above the cursor) for Completed.
        result = await asyncio.to_thread(
            harness_subprocess, ["--db", str(campaign.path), "--session", campaign.name,
                                 "done", "t9"])
        assert result.returncode == 0, result.stderr
        polls_at_commit = app.io.polls

        assert await wait_until(pilot, lambda: board.todo(9).status == "completed")
        await pilot.pause()
        # Seen by the first or second poll after the commit: the poll interval bounds
        # the delay (the benchmark measures it in seconds).
        assert app.last_refresh_poll - polls_at_commit <= 2
        assert POLL_INTERVAL * 2 <= 0.5
        assert "✓ t9" in board.line_text(9)
        assert board.rows.index(9) > board.rows.index("completed")
        # The cursor is still on t40, at the same height on screen.
        assert board.selected == 40
        assert board.cursor - round(board.scroll_y) == screen_line
        header = app.screen.query_one(SessionHeader)
        assert "7/71 done" in str(header.render())


async def test_removed_todo_moves_the_cursor_to_its_neighbour(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        board = app.screen.query_one(Board)
        board.select(11)
        await pilot.pause()
        line = board.cursor
        with store.write(sid, "agent:claude") as tx:
            tx.remove_todo(11, reason="agent dropped it")
        assert await wait_until(pilot, lambda: board.todo(11) is None)
        await pilot.pause()
        assert board.cursor == line
        assert board.selected == board.rows[line]
        assert isinstance(board.selected, int)


async def test_live_log_tail_follows_new_output(campaign: Campaign) -> None:
    from tui.widgets.logtail import LogTail

    store, sid = campaign.store, campaign.session_id
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        await pilot.press("2")
        log = app.screen.query_one(LogTail)
        assert await wait_until(pilot, lambda: len(log.lines) >= 10)
        run = next(r for r in store.runs(sid, todo_id=6) if r.state == "running")
        _, end = store.log(run.id)
        with store.write(sid, "runner") as tx:
            tx.append_log(run.id, end, "\nepoch 2/5  step 600/1250  loss 2.21\n")
        assert await wait_until(pilot, lambda: "epoch 2/5  step 600/1250  loss 2.21"
                                in log.lines)
        # The line that was being rewritten with \r ended as its last state.
        assert "epoch 2/5  step 400/1250  loss 2.25" in log.lines
