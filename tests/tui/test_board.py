"""The board widget on its own: its order is always the fold's board order, however it was
reached (a full sort or in-place moves), and the cursor stays on its todo."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from textual.app import App, ComposeResult

from state.fold import PRIORITIES, STATUSES, TodoState, board_key
from tui.widgets.board import ORDER, Board

pytestmark = pytest.mark.anyio


class BoardApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Board()


def expected_rows(todos: dict[int, TodoState]) -> list[object]:
    rows: list[object] = []
    for status in ORDER:
        rows.append(status)
        rows.extend(t.num for t in sorted(todos.values(), key=board_key) if t.status == status)
    return rows


async def test_order_matches_the_fold_after_random_changes() -> None:
    rng = random.Random(7)
    todos = {n: TodoState(num=n, content=f"todo {n}", status=rng.choice(STATUSES),
                          priority=rng.choice(PRIORITIES), position=float(rng.randint(0, 50)))
             for n in range(1, 301)}
    app = BoardApp()
    async with app.run_test(size=(100, 30)) as pilot:
        board = app.query_one(Board)
        board.show(todos)
        assert board.rows == expected_rows(todos)
        next_num = 301
        for step in range(200):
            todos = dict(todos)
            for _ in range(rng.choice((1, 1, 2, 5, 300))):  # now and then a big refresh
                op = rng.random()
                num = rng.choice(list(todos))
                if op < 0.6:
                    todos[num] = replace(todos[num], status=rng.choice(STATUSES),
                                         priority=rng.choice(PRIORITIES))
                elif op < 0.8:
                    todos[num] = replace(todos[num], position=rng.uniform(-5, 60))
                elif op < 0.9 and len(todos) > 10:
                    del todos[num]
                else:
                    todos[next_num] = TodoState(num=next_num, content="new")
                    next_num += 1
            selected = board.selected
            board.show(todos)
            await pilot.pause(0)
            assert board.rows == expected_rows(todos), f"step {step}"
            if selected in todos:
                assert board.selected == selected


async def test_waiting_on_follows_the_dependency() -> None:
    todos = {1: TodoState(num=1, content="train"),
             2: TodoState(num=2, content="export", depends_on=[1])}
    app = BoardApp()
    async with app.run_test(size=(100, 30)):
        board = app.query_one(Board)
        board.show(todos)
        assert "waiting on t1" in board.line_text(2)
        todos = {**todos, 1: replace(todos[1], status="completed")}
        board.show(todos)
        assert "waiting on" not in board.line_text(2)


async def test_cursor_skips_section_lines() -> None:
    todos = {1: TodoState(num=1, content="a", status="in_progress"),
             2: TodoState(num=2, content="b", status="completed")}
    app = BoardApp()
    async with app.run_test(size=(100, 30)) as pilot:
        board = app.query_one(Board)
        board.show(todos)
        board.focus()
        assert board.selected == 1
        await pilot.press("down")
        assert board.selected == 2  # over "Pending (0)" and "Blocked (0)"
        await pilot.press("down")
        assert board.selected == 2
        await pilot.press("up")
        assert board.selected == 1
