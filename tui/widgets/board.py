"""The board: sections with counts, one line per todo, keyed by todo id.

It draws a line at a time (Textual's Line API), so 10,000 todos cost what a screenful
costs; a DataTable or OptionList lays out every row up front and took 12-17x longer to
first paint at that size (measured, see docs/PERFORMANCE.md). Updates are in place by todo
id: only the rows whose todo changed are redrawn, and the cursor stays on the same todo
at the same height on screen, so a refresh never moves what a person is looking at.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from harness.render import BADGE, GLYPH, SECTION, safe_line
from state.fold import STATUS_GROUP, TodoState, board_key, unmet_dependencies
from tui.views import narrow_figures

ORDER: tuple[str, ...] = tuple(sorted(STATUS_GROUP, key=STATUS_GROUP.__getitem__))
NARROW = 60  # cells for a row's text and extras below which the extras go short
Row = int | str  # a todo number, or a status for that section's header line


def fit(text: str, width: int) -> str:
    """``text`` cut (with an ellipsis) or padded to exactly ``width`` cells."""
    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    return set_cell_size(text, width - 1) + "…"


class Board(ScrollView, can_focus=True):
    """The todo board. Feed it with :meth:`show`; it posts :class:`Board.Selected`."""

    DEFAULT_CSS = """
    Board {
        background: $surface;
        overflow-x: hidden;
        & > .board--section { color: $text-accent; text-style: bold; }
        & > .board--rule { color: $foreground 20%; }
        & > .board--cursor { background: $block-cursor-background; color: $block-cursor-foreground; }
        & > .board--cursor-blurred { background: $block-cursor-blurred-background; }
        & > .board--id { color: $text-muted; }
        & > .board--in_progress { color: $text-warning; text-style: bold; }
        & > .board--pending { color: $foreground; }
        & > .board--blocked { color: $text-error; text-style: bold; }
        & > .board--completed { color: $text-success; }
        & > .board--cancelled { color: $text-muted; }
        & > .board--high { background: $error-muted; color: $text-error; text-style: bold; }
        & > .board--medium { background: $warning-muted; color: $text-warning; }
        & > .board--low { background: $boost; color: $text-muted; }
        & > .board--done-text { color: $text-muted; }
        & > .board--cancelled-text { color: $text-muted; text-style: strike; }
        & > .board--stage { color: $text-primary; }
        & > .board--waiting { color: $text-warning; text-style: italic; }
        & > .board--reason { color: $text-error; }
        & > .board--figures { color: $text-accent; text-style: bold; }
        & > .board--claim { color: $text-primary; }
        & > .board--expired { color: $text-error; text-style: bold; }
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "board--section", "board--rule", "board--cursor", "board--cursor-blurred",
        "board--id", "board--in_progress", "board--pending", "board--blocked",
        "board--completed", "board--cancelled", "board--high", "board--medium", "board--low",
        "board--done-text", "board--cancelled-text", "board--stage", "board--waiting",
        "board--reason", "board--figures", "board--claim", "board--expired",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor_up", "Up", show=False),
        Binding("down,j", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,g", "first", "First", show=False),
        Binding("end,G", "last", "Last", show=False),
    ]

    @dataclass
    class Selected(Message):
        """The highlighted todo changed (``None``: no todo, e.g. an empty board)."""

        board: Board
        todo_id: int | None

        @property
        def control(self) -> Board:
            return self.board

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self._todos: dict[int, TodoState] = {}
        self._waits: dict[int, tuple[int, ...]] = {}
        self._figures: dict[int, str] = {}
        self._claims: dict[int, tuple[str, bool]] = {}
        self._counts: dict[str, int] = dict.fromkeys(ORDER, 0)
        self._sections: dict[str, list[tuple[tuple[int, int, float, int], int]]] = {
            s: [] for s in ORDER}
        self._with_deps: set[int] = set()
        self._rows: list[Row] = list(ORDER)
        self._index: dict[Row, int] = {r: i for i, r in enumerate(self._rows)}
        self._strips: dict[Row, Strip] = {}
        self._styles: dict[str, Style] = {}
        self._id_width = 3
        self._selected: int | None = None
        self.cursor = 0
        self.loaded = False
        self._announced = False

    # -- reading ---------------------------------------------------------------------------
    @property
    def selected(self) -> int | None:
        """The todo under the cursor."""
        return self._selected

    @property
    def rows(self) -> list[Row]:
        """The lines in board order (section statuses and todo numbers)."""
        return list(self._rows)

    def todo(self, num: int) -> TodoState | None:
        return self._todos.get(num)

    def line_text(self, row: Row) -> str:
        """What a line says, as plain text (tests and the benchmark read the board so)."""
        return self._strip(row, max(self.scrollable_content_region.width, 80)).text

    # -- feeding ---------------------------------------------------------------------------
    def show(self, todos: Mapping[int, TodoState],
             figures: Mapping[int, str] | None = None,
             claims: Mapping[int, tuple[str, bool]] | None = None) -> None:
        """Show this list: redraw changed rows, re-sort, keep the cursor on its todo.
        ``figures`` are the verification headlines shown on their todos' rows; ``claims``
        who holds a claimed todo and the time left on its lease, and whether that lease
        ran out (:meth:`tui.views.BoardView.claims`).

        TodoStates are replaced, never mutated, when they change, so "changed" is "not the
        same object": a refresh costs a pass over the ids plus the changed rows, and each
        section is re-sorted only where a todo entered, left or moved (bisect).
        """
        old = self._todos
        changed = [num for num, t in todos.items() if old.get(num) is not t]
        gone = [num for num in old if num not in todos]
        if len(changed) + len(gone) > 256:
            self._sections = {s: [] for s in ORDER}
            for t in todos.values():
                self._sections.setdefault(t.status, []).append((board_key(t), t.num))
            for section in self._sections.values():
                section.sort()
            self._strips.clear()
        else:
            for num in (*changed, *gone):
                before = old.get(num)
                if before is not None:
                    section = self._sections[before.status]
                    del section[bisect_left(section, (board_key(before), num))]
                after = todos.get(num)
                if after is not None:
                    insort(self._sections.setdefault(after.status, []),
                           (board_key(after), num))
                self._strips.pop(num, None)
        figures = dict(figures or {})
        for num in set(figures) | set(self._figures):
            if figures.get(num) != self._figures.get(num):
                self._strips.pop(num, None)
        self._figures = figures
        self._set_claims(claims or {})
        for num in changed:
            if todos[num].depends_on:
                self._with_deps.add(num)
        self._with_deps.difference_update(gone)
        waits = {}
        for num in self._with_deps:
            t = todos[num]
            if t.depends_on and t.status not in ("completed", "cancelled"):
                w = tuple(unmet_dependencies(t, todos))
                if w:
                    waits[num] = w
            if waits.get(num) != self._waits.get(num):
                self._strips.pop(num, None)
        counts = {s: len(self._sections.get(s, ())) for s in ORDER}
        for s in ORDER:
            if counts[s] != self._counts.get(s):
                self._strips.pop(s, None)
        id_width = len(f"t{max(todos, default=1)}")
        if id_width != self._id_width:
            self._id_width = id_width
            self._strips.clear()
        rows: list[Row] = []
        for s in ORDER:
            rows.append(s)
            rows.extend(map(itemgetter(1), self._sections.get(s, ())))

        old_line = self.cursor - round(self.scroll_y)
        old_cursor = self.cursor
        self._todos, self._waits, self._counts = dict(todos), waits, counts
        self._rows = rows
        self._index = {r: i for i, r in enumerate(rows)}
        self.virtual_size = Size(self.scrollable_content_region.width, len(rows))
        if self._selected in self._index:
            cursor = self._index[self._selected]
        elif not self.loaded:
            cursor = 0
        else:
            # The selected todo went away: stay at the same place on the board.
            cursor = min(old_cursor, len(rows) - 1)
        self.loaded = True
        self._place_cursor(cursor, screen_line=old_line)
        self.refresh()

    def show_claims(self, claims: Mapping[int, tuple[str, bool]]) -> None:
        """New claim labels (time left moves on): only the rows whose label changed are
        drawn again."""
        if self._set_claims(claims):
            self.refresh()

    def _set_claims(self, claims: Mapping[int, tuple[str, bool]]) -> bool:
        claims = dict(claims)
        changed = [num for num in set(claims) | set(self._claims)
                   if claims.get(num) != self._claims.get(num)]
        for num in changed:
            self._strips.pop(num, None)
        self._claims = claims
        return bool(changed)

    # -- the cursor ------------------------------------------------------------------------
    def _todo_line(self, line: int, step: int) -> int | None:
        """The first todo line from ``line`` going ``step`` (+1/-1); None if there is none."""
        while 0 <= line < len(self._rows):
            if isinstance(self._rows[line], int):
                return line
            line += step
        return None

    def _place_cursor(self, line: int, *, screen_line: int | None = None) -> None:
        found = self._todo_line(line, 1)
        if found is None:
            found = self._todo_line(line, -1)
        self.cursor = found if found is not None else 0
        height = self.scrollable_content_region.height or 1
        if screen_line is not None and 0 <= screen_line < height:
            self.scroll_to(y=max(self.cursor - screen_line, 0), animate=False, immediate=True, force=True)
        self._ensure_visible()
        self._announce()

    def _move(self, line: int | None) -> None:
        if line is None or line == self.cursor:
            return
        self.refresh_line(self.cursor)
        self.cursor = line
        self.refresh_line(line)
        self._ensure_visible()
        self._announce()

    def refresh_line(self, line: int) -> None:
        self.refresh_lines(line - round(self.scroll_y), 1)

    def _ensure_visible(self) -> None:
        height = self.scrollable_content_region.height
        if height <= 0:
            return
        top = round(self.scroll_y)
        # Keep the section header above the first todo of a section in view too.
        want_top = self.cursor - 1 if self._todo_line(self.cursor - 1, -1) != self.cursor - 1 \
            else self.cursor
        if want_top < top:
            self.scroll_to(y=max(want_top, 0), animate=False, immediate=True, force=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True, force=True)

    def _announce(self) -> None:
        row = self._rows[self.cursor] if self.cursor < len(self._rows) else None
        selected = row if isinstance(row, int) else None
        if selected != self._selected or not self._announced:
            self._announced = True
            self._selected = selected
            self.post_message(self.Selected(self, selected))

    def select(self, num: int) -> None:
        """Put the cursor on todo ``num`` (if it is on the board)."""
        line = self._index.get(num)
        if line is not None:
            self._move(line)

    def action_cursor_down(self) -> None:
        self._move(self._todo_line(self.cursor + 1, 1))

    def action_cursor_up(self) -> None:
        self._move(self._todo_line(self.cursor - 1, -1))

    def action_page_down(self) -> None:
        height = max(self.scrollable_content_region.height - 1, 1)
        target = min(self.cursor + height, len(self._rows) - 1)
        self._move(self._todo_line(target, 1) or self._todo_line(target, -1))

    def action_page_up(self) -> None:
        height = max(self.scrollable_content_region.height - 1, 1)
        target = max(self.cursor - height, 0)
        self._move(self._todo_line(target, -1) or self._todo_line(target, 1))

    def action_first(self) -> None:
        self._move(self._todo_line(0, 1))

    def action_last(self) -> None:
        self._move(self._todo_line(len(self._rows) - 1, -1))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        line = offset.y + round(self.scroll_y)
        if 0 <= line < len(self._rows) and isinstance(self._rows[line], int):
            self._move(line)

    # -- drawing ---------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()
        self._strips.clear()

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()
        self.virtual_size = Size(self.scrollable_content_region.width, len(self._rows))

    def _on_focus(self, event: events.Focus) -> None:
        self.refresh_line(self.cursor)

    def _on_blur(self, event: events.Blur) -> None:
        self.refresh_line(self.cursor)

    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            # Badges keep their own background under the cursor; everything else takes
            # the row's background (the cursor's, on the cursor row).
            style = self._styles[name] = self.get_component_rich_style(
                f"board--{name}", partial=name not in BADGE)
        return style

    def render_line(self, y: int) -> Strip:
        line = round(self.scroll_y) + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if line >= len(self._rows):
            return Strip.blank(width, base)
        row = self._rows[line]
        strip = self._strips.get(row)
        if strip is None or strip.cell_length != width:
            strip = self._strips[row] = self._strip(row, width)
        if line == self.cursor and isinstance(row, int):
            cursor = self._style("cursor" if self.has_focus else "cursor-blurred")
            return strip.apply_style(base + cursor)
        return strip.apply_style(base)

    def _strip(self, row: Row, width: int) -> Strip:
        if isinstance(row, str):
            title = f" {SECTION.get(row, row)} ({self._counts.get(row, 0)}) "
            title = fit(title, min(cell_len(title), width))
            rule = "─" * max(width - cell_len(title), 0)
            return Strip([Segment(title, self._style("section")),
                          Segment(rule, self._style("rule"))], width)
        t = self._todos[row]
        segs = [
            Segment(" "),
            Segment(GLYPH.get(t.status, "?"), self._style(t.status)),
            Segment(" "),
            Segment(fit(t.id, self._id_width), self._style("id")),
            Segment(" "),
            Segment(f" {BADGE.get(t.priority, '?')} ", self._style(t.priority)),
            Segment(" "),
        ]
        used = 4 + self._id_width + 4
        avail = width - used
        narrow = avail < NARROW
        # What follows the text, most telling first: who holds it (and for how long), the
        # evidence, what it waits on, why it is blocked, its stage. A narrow board keeps what fits whole, in short forms
        # (the detail pane has it all).
        extras: list[tuple[str, str]] = []
        claim = self._claims.get(t.num)
        if claim is not None:
            label, ran_out = claim
            extras.append((label, "expired" if ran_out else "claim"))
        figures = self._figures.get(t.num)
        if figures:
            extras.append((narrow_figures(figures) if narrow else figures, "figures"))
        waits = self._waits.get(t.num)
        if waits:
            ids = ", ".join(f"t{d}" for d in waits)
            extras.append((f"⧗ {ids}" if narrow else f"waiting on {ids}", "waiting"))
        if t.status == "blocked" and t.blocked_reason and not narrow:
            extras.append((safe_line(t.blocked_reason), "reason"))
        if t.stage:
            extras.append((safe_line(t.stage, 16), "stage"))
        # The text gets at least 3/5 of the room (and 20 cells); the extras the rest.
        room = max(avail - min(max(avail * 3 // 5, 20), avail), 0)
        tail: list[Segment] = []
        for text, style in extras:
            if narrow and cell_len(text) + 2 > room:
                continue  # cut short it says nothing; a later, shorter one may fit
            if room <= 3:
                break
            piece = fit(text, min(cell_len(text), room - 2))
            tail += [Segment("  "), Segment(piece, self._style(style))]
            room -= cell_len(piece) + 2
        tail_len = sum(cell_len(s.text) for s in tail)
        text_style = {"completed": "done-text", "cancelled": "cancelled-text"}.get(t.status)
        segs.append(Segment(fit(safe_line(t.content), max(avail - tail_len, 0)),
                            self._style(text_style) if text_style else None))
        return Strip([*segs, *tail], width).adjust_cell_length(width)
