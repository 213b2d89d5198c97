"""What a newcomer sees first: the verify todo's figures on the board, its gate in the
Detail tab, full check names with a verdict, a history without runner internals, a help
that says how to move and close, and all of it at 80x24."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from rich.console import Console

from tests.tui.conftest import Campaign, wait_until
from tests.tui.test_bindings import select
from tui.app import HarnessApp
from tui.screens.help import HelpScreen
from tui.widgets.board import Board
from tui.widgets.detail import DetailPane

pytestmark = pytest.mark.anyio


def screen_text(app: HarnessApp) -> str:
    """The screen as plain text, as the terminal shows it."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      force_terminal=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return console.export_text()


async def shown(app: HarnessApp, pilot: Any, num: int, *keys: str) -> list[str]:
    await select(app, pilot, num)
    for key in keys:
        await pilot.press(key)
        await app.settled()
    await pilot.pause()
    return screen_text(app).splitlines()


async def test_80x24_keeps_help_quit_text_and_figures(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(80, 24)) as pilot:
        lines = await shown(app, pilot, 8)
        footer = lines[23]
        assert "? Help" in footer and "q Quit" in footer
        board = app.screen.query_one(Board)
        row = next(ln.split("▕")[0] for ln in lines if ln.startswith(" ■ t8 "))
        # the verify todo's figures, on its board row: τ, without the reference loop's
        # projected speedup, which a short row could not tell from a served one
        assert "τ1.87" in row and "1.04x" not in row
        text = row.split(" H  ", 1)[1].split("…")[0]
        assert len(text) >= 20, row  # the todo's text is not cut to 15 cells
        assert board.selected == 8
        pane = "\n".join(ln.split("▕", 1)[1] for ln in lines if "▕" in ln)
        # the gate, in the Detail tab ("1.04x proj" wraps at this width)
        assert "FAILED" in pane and re.search(r"τ 1\.87  1\.04x\s+proj", pane)
        assert "✗ acceptance_length 1.87" in pane


async def test_the_verification_tab_at_80x24(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(80, 24)) as pilot:
        lines = await shown(app, pilot, 8, "3")
        pane = [ln.split("▕", 1)[1] for ln in lines if "▕" in ln]
        attempts = [ln for ln in pane if "v2  11-30" in ln or "v1  11-30" in ln]
        assert len(attempts) == 2  # one line each: the list does not wrap
        assert pane.index(next(ln for ln in pane if "Gate" in ln)) < \
            pane.index(next(ln for ln in pane if "Checks" in ln))


async def test_checks_have_a_verdict_and_their_whole_names(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(140, 60)) as pilot:
        lines = await shown(app, pilot, 8, "3")
        pane = "\n".join(ln.split("▕", 1)[1] for ln in lines if "▕" in ln)
        assert "verdict" in pane
        for name in ("keys_and_shapes", "d2t_present", "acceptance_length",
                     "projected_speedup"):
            assert name in pane
        assert "FAIL     acceptance_length" in pane and "pass     keys_and_shapes" in pane


async def test_history_hides_runner_internals_until_asked(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(140, 60)) as pilot:
        hidden = "\n".join(await shown(app, pilot, 8))
        assert "job: None ->" not in hidden and "owner:" not in hidden
        assert "runner events hidden (i shows them)" in hidden
        assert "run r9 failed" in hidden  # a run's state changes stay, in a few words
        everything = "\n".join(await shown(app, pilot, 8, "i"))
        assert app.screen.query_one(DetailPane).internals
        assert "runner events hidden" not in everything


async def test_help_lists_movement_and_how_to_close(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(100, 60)) as pilot:
        text = "\n".join(await shown(app, pilot, 8, "question_mark"))
        assert isinstance(app.screen, HelpScreen)
        assert "esc, ? or q closes this help" in text
        for keys in ("up  k", "down  j", "pageup  pagedown", "home  g", "end  G"):
            assert keys in text
        assert "Show or hide the runner's" in text
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


async def test_the_log_tab_wraps_long_lines_and_wraps_them_again_on_resize(
        campaign: Campaign) -> None:
    from tui.widgets.logtail import LogTail

    store, sid = campaign.store, campaign.session_id
    long = ("loading shards from /data/eagle3/runs/r8/hidden/shard-00017.safetensors: "
            "done, 65536 tokens, the last figure at the very end 0.8813")
    run = next(r for r in store.runs(sid, todo_id=6) if r.state == "running")
    _, end = store.log(run.id)
    with store.write(sid, "runner") as tx:
        tx.append_log(run.id, end, "\n" + long + "\n")
    app = campaign.app()
    async with app.run_test(size=(80, 24)) as pilot:
        lines = await shown(app, pilot, 6, "2")
        tail = app.screen.query_one(LogTail)
        assert long in tail.lines
        text = "\n".join(lines)
        assert "0.8813" in text, text  # the end of the line is on the screen

        def rows_of_long() -> list[str]:
            from textual.widgets import RichLog

            log = tail.query_one(RichLog)
            width = log.scrollable_content_region.width
            rows = [s.text.rstrip() for s in log.lines]
            assert all(len(r) <= width for r in rows), (width, rows)
            start = next(i for i, r in enumerate(rows) if r.startswith("loading shards"))
            stop = next(i for i, r in enumerate(rows) if r.endswith("0.8813")) + 1
            # the rows hold the whole line, in order (wrapped at spaces, or within a word)
            assert "".join(rows[start:stop]).replace(" ", "") == long.replace(" ", "")
            return rows[start:stop]

        narrow = rows_of_long()
        assert len(narrow) > 2
        await pilot.resize_terminal(160, 30)
        await app.settled()
        await pilot.pause()
        wide = rows_of_long()
        assert len(wide) < len(narrow)


async def test_toasts_leave_the_detail_panes_last_lines_visible(campaign: Campaign) -> None:
    from textual.widgets import TabbedContent

    app = campaign.app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await shown(app, pilot, 8)
        pane = app.screen.query_one(DetailPane)
        tabs = pane.query_one(TabbedContent)
        full = tabs.region
        for i in range(3):
            app.notify(f"t{i} is already completed; nothing changed", severity="warning")

        def toasts() -> list[Any]:
            return [t for t in app.screen.query("Toast") if t.region.height]

        def pane_above_toasts() -> bool:
            shown_now = toasts()
            return (len(shown_now) == 3
                    and tabs.region.bottom <= min(t.region.y for t in shown_now))

        # a busy machine lays the toasts out, then the pane, a few frames later
        assert await wait_until(pilot, pane_above_toasts), (tabs.region, toasts())
        top = min(t.region.y for t in toasts())
        assert top < full.bottom  # the toasts sit over where the pane's end was
        board = app.screen.query_one(Board)
        assert all(t.region.x >= board.region.right for t in toasts())  # never over the board
        app.clear_notifications()
        # and the pane has its lines back once they are gone
        assert await wait_until(pilot, lambda: tabs.region == full), tabs.region
