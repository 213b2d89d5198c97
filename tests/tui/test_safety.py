"""Text from the store is shown as text: markup and escape sequences stay literal."""

from __future__ import annotations

import re

import pytest

from tests.tui.conftest import Campaign
from tui.widgets.board import Board
from tui.widgets.verification import VerificationPanel

pytestmark = pytest.mark.anyio

HOSTILE = "[bold]not bold[/bold] \x1b[31mred\x1b[0m [link=http://x]y[/link] \x1b]0;pwned\x07"
SHOWN = "[bold]not bold[/bold] \\x1b[31mred\\x1b[0m [link=http://x]y[/link] \\x1b]0;pwned\\x07"


def screen_text(svg: str) -> str:
    """The characters of a screenshot, as a person would read them."""
    text = re.sub(r"<[^>]+>", "", svg.replace("&#160;", " "))
    return (text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
            .replace("&#x27;", "'").replace("&amp;", "&"))


async def test_markup_and_escapes_in_store_text_are_literal(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    with store.write(sid, "agent:evil") as tx:
        t = tx.create_todo(HOSTILE, stage="[red]stage", priority="high", origin="agent")
        tx.update_todo(t.num, status="blocked", blocked_reason="[i]why[/i] \x1b[2J")
        tx.emit("todo.noted", todo_id=t.num, payload={"text": "[b]note[/b] \x1b[1A"})
        run = tx.queue_run(todo_id=t.num, host="[u]host", stage="x")
        tx.update_run(run.id, state="running", started_at="2026-11-30T15:00:00Z")
        tx.append_log(run.id, 0, "[bold]log[/bold] \x1b]0;title\x07 \x07bell\n")
        tx.record_verification(todo_id=t.num, kind="checkpoint", passed=False,
                               verdict="[blink]bad[/blink] \x1b[5m",
                               checks=[{"name": "[x]", "passed": False, "value": "[y]",
                                        "expected": "\x1b[31m", "message": "[z]"}],
                               metrics={"tau": 1.0, "[k]": "[v]"}, gate={"[g]": 1})
    app = campaign.app()
    async with app.run_test(size=(200, 50)) as pilot:
        await app.settled()
        board = app.screen.query_one(Board)
        board.select(t.num)
        await pilot.pause()
        await app.settled()
        await pilot.pause()
        assert SHOWN[:60] in board.line_text(t.num)
        detail = screen_text(app.export_screenshot())
        for literal in ("[bold]not bold[/bold]", "\\x1b[31mred", "[link=http://x]y[/link]",
                        "[i]why[/i] \\x1b[2J", "[b]note[/b] \\x1b[1A", "[u]host"):
            assert literal in detail, literal
        assert "\x1b" not in detail and "\x07" not in detail

        await pilot.press("2")
        await pilot.pause()
        log = screen_text(app.export_screenshot())
        assert "[bold]log[/bold]" in log
        assert "\x1b" not in log and "\x07" not in log

        await pilot.press("3")
        await pilot.pause()
        panel = app.screen.query_one(VerificationPanel)
        assert panel.chosen is not None
        verification = screen_text(app.export_screenshot())
        for literal in ("[blink]bad[/blink] \\x1b[5m", "[x]", "[y]", "\\x1b[31m", "[z]", "[k]",
                        "[v]", "[g]"):
            assert literal in verification, literal
        assert "\x1b" not in verification


async def test_edit_prompt_shows_control_characters_escaped(campaign: Campaign) -> None:
    from textual.widgets import Input

    store, sid = campaign.store, campaign.session_id
    with store.write(sid, "agent:evil") as tx:
        t = tx.create_todo("line one\nline two \x1b[31m", priority="high")
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        app.screen.query_one(Board).select(t.num)
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        value = app.screen.query_one(Input).value
        assert value == "line one⏎line two \\x1b[31m"
        await pilot.press("enter")  # unchanged: nothing is written
        await app.settled()
    assert store.todo(sid, t.num).content == "line one\nline two \x1b[31m"
