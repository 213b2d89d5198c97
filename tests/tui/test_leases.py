"""The board marks claimed todos with their holder and the time left on their lease, and
a lease that ran out, until a write ends it (issue 35)."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from textual.widgets import Static

from tests.tui.conftest import Campaign
from tests.tui.test_live import wait_until
from tui.widgets.board import Board
from tui.widgets.detail import DetailPane

pytestmark = pytest.mark.anyio


def claim(campaign: Campaign, num: int, agent: str, lease: float | None) -> None:
    with campaign.store.write(campaign.session_id, agent) as tx:
        tx.update_todo(num, status="in_progress", claimed_by=agent, lease_s=lease)


async def test_claims_show_holder_time_left_and_leases_that_ran_out(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    with store.write(sid, "human") as tx:
        for text in ("Profile the data loader", "Write the model card", "Tag the release"):
            tx.create_todo(text, priority="high")  # t13, t14, t15
    claim(campaign, 13, "agent:w3", 600)
    claim(campaign, 15, "agent:w5", None)
    app = campaign.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await app.settled()
        board = app.screen.query_one(Board)
        assert "w3 · 9m left" in board.line_text(13) or "w3 · 10m left" in board.line_text(13)
        assert board.line_text(15).rstrip().endswith("w5")  # a claim without a lease
        # Another agent claims t14 with a short lease and goes silent. The lease is long
        # enough that a loaded machine still draws the board before it runs out.
        await asyncio.to_thread(claim, campaign, 14, "agent:w4", 4.0)
        assert await wait_until(
            pilot, lambda: re.search(r"w4 · [0-4]s left", board.line_text(14)) is not None)
        # Nobody writes: the board itself sees the lease run out (its clock ticks).
        assert await wait_until(
            pilot, lambda: "w4 · lease ran out" in board.line_text(14), attempts=800)
        assert "lease ran out" not in board.line_text(13)
        board.select(14)
        head = app.screen.query_one(DetailPane).query_one("#detail-head", Static)
        assert await wait_until(pilot, lambda: "claimed by agent:w4" in str(head.render()))
        assert "ran out at" in str(head.render())
        # A write (any: here a sweep) ends it; the board shows t14 pending, unclaimed.
        ended = await asyncio.to_thread(store.expire_lapsed, sid)
        assert [e.todo_id for e in ended] == [14]
        assert await wait_until(pilot, lambda: board.todo(14).status == "pending")
        await pilot.pause()
        assert "w4" not in board.line_text(14)
        # w3 renews (no event): the board reads the lease again and time left goes back up.
        before = store.leases(sid)[1][13].expires_at
        time.sleep(0.05)
        await asyncio.to_thread(store.renew_leases, sid, "agent:w3")
        assert store.leases(sid)[1][13].expires_at > before
        assert await wait_until(
            pilot, lambda: app.screen.board_view.leases[13].expires_at > before)
