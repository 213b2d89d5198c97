"""A one-line question: the block reason, a new todo's text, an edit, a note, a fork name."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class PromptScreen(ModalScreen[str | None]):
    """Dismisses with the text entered (stripped), or None when cancelled or empty."""

    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical {
        width: 80%;
        max-width: 100;
        height: auto;
        border: round $accent;
        background: $panel;
        padding: 0 1;
    }
    PromptScreen #prompt-title { text-style: bold; margin-bottom: 1; }
    PromptScreen #prompt-note { color: $text-warning; }
    PromptScreen #prompt-hint { color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(self, title: str, *, value: str = "", placeholder: str = "",
                 note: str = "") -> None:
        super().__init__()
        self._title = title
        self._value = value
        self._placeholder = placeholder
        self._note = note

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self._title), id="prompt-title")
            yield Input(value=self._value, placeholder=self._placeholder, id="prompt-input")
            if self._note:
                yield Static(Text(self._note), id="prompt-note")
            yield Static(Text("enter: save   esc: cancel"), id="prompt-hint")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        self.dismiss(value or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
