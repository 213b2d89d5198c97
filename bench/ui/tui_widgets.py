"""Why the board is a Line API widget: first paint of 10 vs 10,000 rows in Textual's
DataTable, OptionList, and our Board, each alone in an app, headless.

    python -m bench.ui.tui_widgets              # 10 vs 10,000 rows, median of 3
    python -m bench.ui.tui_widgets --rows 50000 --repeat 5

Prints one table: the median time from creating the app to the first frame with the rows
on it, and the ratio of the big list to the small one (the TUI's target is 2x).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widget import Widget
from textual.widgets import DataTable, OptionList
from textual.widgets.option_list import Option

from state.fold import PRIORITIES, STATUSES, TodoState
from tui.widgets.board import Board

SIZE = (140, 40)


def todos(n: int) -> dict[int, TodoState]:
    return {i: TodoState(num=i, content=f"step {i}: a todo of a long campaign, with words",
                         status=STATUSES[i % 5], priority=PRIORITIES[i % 3], position=float(i),
                         stage=f"stage{i % 10}") for i in range(1, n + 1)}


def fill_datatable(table: DataTable, items: dict[int, TodoState]) -> None:
    for key in ("glyph", "id", "prio", "text", "stage"):
        table.add_column(key, key=key)
    for t in items.values():
        table.add_row(Text(t.status[0]), Text(t.id), Text(t.priority[0]), Text(t.content),
                      Text(t.stage or ""), key=t.id)


def fill_optionlist(options: OptionList, items: dict[int, TodoState]) -> None:
    options.add_options([Option(Text(f"{t.status[0]} {t.id} {t.priority[0]} {t.content}  "
                                     f"{t.stage}", no_wrap=True), id=t.id)
                         for t in items.values()])


class One(App[None]):
    def __init__(self, kind: str, items: dict[int, TodoState]):
        super().__init__()
        self.kind = kind
        self.items = items

    def compose(self) -> ComposeResult:
        widget: Widget
        if self.kind == "DataTable":
            widget = DataTable(cursor_type="row", show_header=False)
        elif self.kind == "OptionList":
            widget = OptionList()
        else:
            widget = Board()
        yield widget

    def on_mount(self) -> None:
        widget = self.query_one("*")
        with self.batch_update():
            if isinstance(widget, DataTable):
                fill_datatable(widget, self.items)
            elif isinstance(widget, OptionList):
                fill_optionlist(widget, self.items)
            else:
                assert isinstance(widget, Board)
                widget.show(self.items)


async def first_paint(kind: str, items: dict[int, TodoState]) -> float:
    start = time.perf_counter()
    app = One(kind, items)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    small, big = todos(10), todos(args.rows)
    print(f"widget     | {10:>8,} rows | {args.rows:>8,} rows | ratio")
    print("-----------|---------------|---------------|------")
    for kind in ("DataTable", "OptionList", "Board"):
        a = statistics.median(asyncio.run(first_paint(kind, small)) for _ in range(args.repeat))
        b = statistics.median(asyncio.run(first_paint(kind, big)) for _ in range(args.repeat))
        print(f"{kind:<10} | {a * 1000:10.0f} ms | {b * 1000:10.0f} ms | {b / a:5.1f}x")


if __name__ == "__main__":
    main()
