"""Every key that changes a todo writes exactly the events the CLI command writes.

Each test runs on two copies of the same store: the TUI on one (keys pressed through
Textual's pilot), the CLI on the other, then compares the new events field by field
(kind, todo, actor, payload). Only the timestamps may differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from state.store import Store
from tests.conftest import run_cli
from tests.tui.conftest import Campaign, wait_until
from tui.app import HarnessApp
from tui.widgets.board import Board

pytestmark = pytest.mark.anyio


def new_events(store: Store, sid: int, after: int) -> list[tuple[Any, ...]]:
    return [(e.kind, e.todo_id, e.actor, e.payload) for e in store.events(sid, after_n=after)]


async def select(app: HarnessApp, pilot: Any, num: int) -> None:
    await app.settled()
    board = app.screen.query_one(Board)
    board.select(num)
    await pilot.pause()
    assert board.selected == num


async def type_into_prompt(pilot: Any, text: str) -> None:
    await pilot.pause()
    await pilot.press(*[{" ": "space", "-": "minus", ",": "comma", ".": "full_stop"}.get(c, c)
                        for c in text])
    await pilot.press("enter")


# (keys, text typed into the prompt, todo, the CLI command doing the same)
CASES = [
    (["s"], None, 9, ["start", "t9"]),
    (["d"], None, 6, ["done", "t6"]),
    (["x"], None, 11, ["cancel", "t11"]),
    (["b"], "waiting for the node", 9, ["block", "t9", "--reason", "waiting for the node"]),
    (["u"], None, 8, ["unblock", "t8"]),
    (["plus"], None, 11, ["prio", "t11", "up"]),
    (["equals_sign"], None, 10, ["prio", "t10", "up"]),
    (["minus"], None, 6, ["prio", "t6", "down"]),
    (["K"], None, 3, ["move", "t3", "--up"]),
    (["shift+up"], None, 5, ["move", "t5", "--up"]),
    (["J"], None, 2, ["move", "t2", "--down"]),
    (["shift+down"], None, 3, ["move", "t3", "--down"]),
    (["a"], "write the model card", None, ["add", "write the model card"]),
    (["e"], "serve with vllm at k 4", 9, ["edit", "t9", "serve with vllm at k 4"]),
    (["n"], "needs the second node", 10, ["note", "t10", "needs the second node"]),
]


@pytest.mark.parametrize(("keys", "text", "num", "cli_args"), CASES,
                         ids=[" ".join(c[3][:1] + c[0]) for c in CASES])
async def test_key_writes_what_the_cli_writes(campaign: Campaign, twin: Path, keys: list[str],
                                              text: str | None, num: int | None,
                                              cli_args: list[str]) -> None:
    store, sid = campaign.store, campaign.session_id
    before = store.last_n(sid)
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await select(app, pilot, num if num is not None else 6)
        await pilot.press(*keys)
        if text is not None:
            await type_into_prompt(pilot, text)
        await app.settled()
        await pilot.pause()
    tui_events = new_events(store, sid, before)

    result = run_cli(["--db", str(twin), "--session", campaign.name, *cli_args])
    assert result.code == 0, result.err
    with Store.open(str(twin)) as other:
        cli_events = new_events(other, sid, before)

    assert tui_events, "the key wrote nothing"
    assert tui_events == cli_events
    assert {e[2] for e in tui_events} == {"human"}


async def test_board_shows_the_change_in_place(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await select(app, pilot, 11)
        board = app.screen.query_one(Board)
        await pilot.press("plus")
        await app.settled()
        await pilot.pause()
        # t11 went from medium to high: first of the pending section, cursor still on it.
        assert board.todo(11).priority == "high"
        assert board.rows[board.rows.index("pending") + 1] == 11
        assert board.selected == 11
        await pilot.press("d")
        await app.settled()
        await pilot.pause()
        assert board.todo(11).status == "completed"
        assert board.selected == 11
        assert "✓ t11" in board.line_text(11)


async def test_noop_writes_nothing_and_says_so(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    before = store.last_n(sid)
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await select(app, pilot, 6)  # already high
        await pilot.press("plus")
        await app.settled()
        await pilot.press("u")  # not blocked
        await app.settled()
        await pilot.pause()
        messages = [n.message for n in app._notifications]
    assert store.last_n(sid) == before
    assert any("already high priority" in m for m in messages)
    assert any("not blocked" in m for m in messages)


async def test_cancelled_prompts_write_nothing(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    before = store.last_n(sid)
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await select(app, pilot, 9)
        for key in ("b", "a", "e", "n"):
            await pilot.press(key)
            await pilot.pause()
            await pilot.press("escape")
            await pilot.pause()
        await pilot.press("b")
        await pilot.pause()
        await pilot.press("enter")  # an empty reason does not block
        await app.settled()
    assert store.last_n(sid) == before
    assert store.todo(sid, 9).status == "pending"


async def test_added_todo_gets_the_cursor(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await app.settled()
        await pilot.press("a")
        await type_into_prompt(pilot, "write the model card")
        await app.settled()
        await pilot.pause()
        board = app.screen.query_one(Board)
        assert board.selected == 13
        assert board.todo(13).content == "write the model card"
    assert campaign.store.todo(campaign.session_id, 13).origin == "human"


async def test_remapped_key(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    app = campaign.app(keymap={"todo.done": "D"})
    async with app.run_test(size=(140, 40)) as pilot:
        await select(app, pilot, 9)
        await pilot.press("d")  # no longer bound
        await app.settled()
        assert store.todo(sid, 9).status == "pending"
        await pilot.press("D")
        await app.settled()
    assert store.todo(sid, 9).status == "completed"


async def test_command_palette_offers_the_actions(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await select(app, pilot, 9)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for wanted in ("Mark the selected todo in progress", "Mark the selected todo completed",
                       "Block the selected todo (asks for a reason)",
                       "Raise the selected todo's priority one step", "Add a todo (asks for "
                       "its text)", "Replay this session, event by event"):
            assert wanted in titles
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"completed")

        def offered() -> bool:  # the palette searches in the background
            from textual.command import CommandList
            lists = app.screen.query(CommandList)
            if not lists:
                return False
            found = lists.first()
            return found.highlighted is not None and "completed" in str(
                found.get_option_at_index(found.highlighted).prompt)

        assert await wait_until(pilot, offered)
        await pilot.press("enter")
        await pilot.pause()
        await app.settled()
    events = store.events(sid, todo_id=9)
    assert events[-1].actor == "human"
    assert events[-1].payload["changes"]["status"] == ["pending", "completed"]


async def test_tabs_and_help(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=(140, 40)) as pilot:
        await select(app, pilot, 8)
        from tui.widgets.detail import DetailPane

        pane = app.screen.query_one(DetailPane)
        for key, tab in (("3", "verification"), ("2", "log"), ("1", "detail")):
            await pilot.press(key)
            await pilot.pause()
            assert pane.active == tab
        await pilot.press("question_mark")
        await pilot.pause()
        from tui.screens.help import HelpScreen

        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
