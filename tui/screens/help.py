"""The keys of the screen underneath, with their ids (for remapping) and the config path."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.keys import APP_KEYS, MOVEMENT_KEYS, KeyAction, config_path


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90%;
        max-width: 110;
        height: 90%;
        border: round $accent;
        background: $panel;
        padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "close", "Close", id="help.close")]

    def __init__(self, title: str, actions: tuple[KeyAction, ...], keys: dict[str, str]):
        super().__init__()
        self._title = title
        self._actions = actions
        self._keys = keys  # binding id -> the keys in force (after the keymap)

    def compose(self) -> ComposeResult:
        # A narrow terminal gets two columns: the id goes under what the key does.
        narrow = self.app.size.width < 110
        table = Table(box=None, padding=(0, 2), header_style="bold", expand=True)
        table.add_column(Text("keys"), no_wrap=True)
        table.add_column(Text("does" + ("  (id, to remap in tui.toml)" if narrow else "")),
                         ratio=1)
        if not narrow:
            table.add_column(Text("id (remap in tui.toml)"), no_wrap=True, style="dim")
        seen: set[str] = set()
        for a in (*self._actions, *APP_KEYS):
            if a.id in seen:
                continue
            seen.add(a.id)
            keys = self._key_text(self._keys.get(a.id, a.keys), names=not narrow)
            if narrow:
                does = Text(a.help)
                does.append(f"  ({a.id})", style="dim")
                table.add_row(keys, does)
            else:
                table.add_row(keys, Text(a.help), Text(a.id))
        extra = [*MOVEMENT_KEYS, ("ctrl+p", "Command palette: every action by name")]
        for keys_text, does_text in extra:
            cells = [Text(keys_text, style="bold"), Text(does_text)]
            table.add_row(*cells, *([] if narrow else [Text("")]))
        intro = Text()
        intro.append(f"{self._title}\n", style="bold")
        intro.append("esc, ? or q closes this help.\n", style="bold")
        intro.append("Keys can be remapped by id in ")
        intro.append(str(config_path()), style="bold")
        intro.append(', e.g.\n  [keys]\n  "todo.done" = "D"\n', style="")
        with VerticalScroll():
            yield Static(intro)
            yield Static(table)

    def _key_text(self, keys: str, *, names: bool = True) -> Text:
        """``left_square_bracket,r`` -> ``[ (left_square_bracket)  r``: what to press, and
        (with ``names``) the name to write in tui.toml where the two differ."""
        out = Text()
        for i, key in enumerate(keys.split(",")):
            shown = self.app.get_key_display(Binding(key, ""))
            if i:
                out.append("  ")
            out.append(shown, style="bold")
            if names and shown.lower() != key.lower():
                out.append(f" ({key})", style="dim")
        return out

    def action_close(self) -> None:
        self.dismiss(None)
