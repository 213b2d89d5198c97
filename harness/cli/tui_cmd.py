"""``harness tui``: the one door from the harness into the Textual app.

The ``tui`` package is imported inside the command, so every other command starts
without loading Textual (``tests/test_layers.py`` checks this).
"""

from __future__ import annotations

import sys

import click

from harness.cli.common import common_options, harness
from harness.errors import UsageError


@click.command("tui")
@click.option("--replay", is_flag=True,
              help="Open in replay mode: step through the session's events (←/→, Home/End, "
                   "[ ] between status changes), read-only, and fork from any of them.")
@common_options
def tui(replay: bool) -> None:
    """Open the board of the current session in the terminal UI.

    Watch progress live (changes by agents, the runner or the CLI show within half a
    second), mark and reprioritise todos (every change is an event with actor `human`,
    as from the CLI), read each todo's history, runs, live log and verification results,
    and replay the session. `?` lists the keys; they can be remapped in
    `<config dir>/tui.toml` (see `harness where` and docs/tui.md).
    """
    h = harness()
    session = h.session()
    # The one place the harness imports the TUI; lazily, so other commands stay light.
    from tui.keys import load_keymap

    keymap = load_keymap()  # a broken config is reported even where no terminal is
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("harness tui needs a terminal",
                         hint="use `harness list` or `harness list --json` in scripts")
    from tui.app import HarnessApp

    app = HarnessApp(h.store, session.id, replay=replay, keymap=keymap)
    app.run()
    # Let the store thread finish before the CLI closes the store under it.
    app.io.stopped.wait(2.0)


def register(cli: click.Group) -> None:
    cli.add_command(tui)
