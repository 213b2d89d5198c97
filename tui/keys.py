"""Every key binding of the TUI, with the id a person uses to remap it.

Remap keys in ``<config dir>/tui.toml`` (``harness where`` shows the config directory;
``HARNESS_CONFIG_DIR`` overrides it)::

    [keys]
    "todo.done" = "D"                # one key
    "todo.priority-up" = "plus,K"    # or several, comma-separated (Textual key names)

Key names are Textual's: letters, ``plus``, ``minus``, ``question_mark``,
``left_square_bracket``, ``shift+up``, ``ctrl+x``, ...
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from textual.binding import Binding

from harness.errors import InputError
from harness.paths import config_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_FILE = "tui.toml"


@dataclass(frozen=True)
class KeyAction:
    id: str  # what a person remaps: "todo.done"
    keys: str  # default keys, Textual names, comma-separated
    action: str  # the screen's action
    description: str  # footer label
    help: str  # help screen and command palette
    show: bool = True  # in the footer
    priority: bool = False  # before the focused widget's own keys


# Help and Quit come first: a narrow footer keeps the keys it shows first.
HELP = KeyAction("app.help", "question_mark", "help", "Help", "Show the keys")
QUIT = KeyAction("app.quit", "q", "app.quit", "Quit", "Quit the TUI")

BOARD_KEYS: tuple[KeyAction, ...] = (
    HELP,
    QUIT,
    KeyAction("todo.start", "s", "start", "Start", "Mark the selected todo in progress"),
    KeyAction("todo.done", "d", "done", "Done", "Mark the selected todo completed"),
    KeyAction("todo.cancel", "x", "cancel", "Cancel", "Cancel the selected todo"),
    KeyAction("todo.block", "b", "block", "Block", "Block the selected todo (asks for a reason)"),
    KeyAction("todo.unblock", "u", "unblock", "Unblock", "Unblock the selected todo (to pending)"),
    KeyAction("todo.priority-up", "plus,equals_sign", "priority_up", "Prio↑",
              "Raise the selected todo's priority one step"),
    KeyAction("todo.priority-down", "minus", "priority_down", "Prio↓",
              "Lower the selected todo's priority one step"),
    KeyAction("todo.move-up", "shift+up,K", "move_up", "Move↑",
              "Move the selected todo up among its neighbours", show=False),
    KeyAction("todo.move-down", "shift+down,J", "move_down", "Move↓",
              "Move the selected todo down among its neighbours", show=False),
    KeyAction("todo.add", "a", "add", "Add", "Add a todo (asks for its text)"),
    KeyAction("todo.edit", "e", "edit", "Edit", "Edit the selected todo's text"),
    KeyAction("todo.note", "n", "note", "Note", "Add a note to the selected todo"),
    KeyAction("view.replay", "r", "replay", "Replay", "Replay this session, event by event"),
    KeyAction("view.charts", "c", "charts", "Charts",
              "Every chart of the selected todo, its runs overlaid (live while it runs)"),
    KeyAction("view.detail", "1", "tab('detail')", "Detail", "Show the detail tab", show=False),
    KeyAction("view.log", "2", "tab('log')", "Log", "Show the live log tab", show=False),
    KeyAction("view.verification", "3", "tab('verification')", "Verification",
              "Show the verification tab", show=False),
    KeyAction("view.internals", "i", "toggle_internals", "Internals",
              "Show or hide the runner's own events (job, pid, owner) in the history",
              show=False),
)

REPLAY_KEYS: tuple[KeyAction, ...] = (
    HELP,
    QUIT,
    KeyAction("replay.back", "left", "step(-1)", "Back", "One event back", priority=True),
    KeyAction("replay.forward", "right", "step(1)", "Forward", "One event forward",
              priority=True),
    KeyAction("replay.first", "home", "goto_first", "First", "The first event", priority=True),
    KeyAction("replay.last", "end", "goto_last", "Last", "The last event", priority=True),
    KeyAction("replay.previous-status", "left_square_bracket", "jump(-1)", "◀Status",
              "The previous status change"),
    KeyAction("replay.next-status", "right_square_bracket", "jump(1)", "Status▶",
              "The next status change"),
    KeyAction("replay.fork", "f", "fork", "Fork here",
              "Fork a new session from this event (asks for its name)"),
    KeyAction("replay.leave", "escape,r", "leave", "Live", "Back to the live board"),
    KeyAction("replay.detail", "1", "tab('detail')", "Detail", "Show the detail tab",
              show=False),
    KeyAction("replay.verification", "3", "tab('verification')", "Verification",
              "Show the verification tab", show=False),
    KeyAction("replay.internals", "i", "toggle_internals", "Internals",
              "Show or hide the runner's own events in the history", show=False),
)

CHART_KEYS: tuple[KeyAction, ...] = (
    HELP,
    QUIT,
    KeyAction("charts.close", "escape,c", "close", "Board", "Back to the board"),
)

APP_KEYS: tuple[KeyAction, ...] = (
    KeyAction("app.quit", "q", "quit", "Quit", "Quit the TUI", show=False),
)

# The board's own keys (tui.widgets.board.Board): listed in the help, not remappable.
MOVEMENT_KEYS: tuple[tuple[str, str], ...] = (
    ("up  k", "Previous todo"),
    ("down  j", "Next todo"),
    ("pageup  pagedown", "A screenful up or down"),
    ("home  g", "The first todo"),
    ("end  G", "The last todo"),
    ("tab  shift+tab", "Focus the next or previous pane (board, detail tabs, lists)"),
)

ALL_KEYS: tuple[KeyAction, ...] = (*BOARD_KEYS, *REPLAY_KEYS, *CHART_KEYS, *APP_KEYS)
KNOWN_IDS: frozenset[str] = frozenset(k.id for k in ALL_KEYS)


def bindings(actions: Iterable[KeyAction]) -> list[Binding]:
    return [Binding(a.keys, a.action, a.description, show=a.show, priority=a.priority,
                    id=a.id, tooltip=a.help) for a in actions]


def config_path() -> Path:
    return config_dir() / CONFIG_FILE


def load_keymap(path: Path | None = None) -> dict[str, str]:
    """The ``[keys]`` table of the TUI config: binding id -> keys. No file: no changes.

    A broken file is an error that names the file and the problem, not a silent default.
    """
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InputError(f"cannot read the TUI config ({exc.strerror})", where=str(path)) \
            from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"not valid TOML: {exc}", where=str(path)) from None
    unknown_tables = set(data) - {"keys"}
    if unknown_tables:
        raise InputError(f"unknown section(s) {', '.join(sorted(unknown_tables))}",
                         where=str(path), hint="the TUI config has one table, [keys]")
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        raise InputError("[keys] must be a table of binding id = \"keys\"", where=str(path))
    keymap: dict[str, str] = {}
    for binding_id, value in keys.items():
        if binding_id not in KNOWN_IDS:
            raise InputError(f"unknown binding id {binding_id!r} in [keys]", where=str(path),
                             hint="`harness tui` shows the ids with ?; see docs/tui.md")
        if not isinstance(value, str) or not value.strip() or \
                any(not k.strip() for k in value.split(",")):
            raise InputError(f"keys for {binding_id!r} must be a string like \"d\" or "
                             "\"plus,K\"", where=str(path))
        keymap[binding_id] = ",".join(k.strip() for k in value.split(","))
    return keymap
