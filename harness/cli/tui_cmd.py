"""``harness tui``: the one door from the harness into the Textual app.

The ``tui`` package is imported inside the command, so every other command starts
without loading Textual (``tests/test_layers.py`` checks this).
"""

from __future__ import annotations

import os
import signal
import sys

import click

from harness.cli.common import common_options, harness
from harness.errors import HarnessError, Interrupted, Terminated, UsageError

# textual-serve starts the app with this driver; its terminal is then a websocket, not a tty.
_WEB_DRIVER = "textual.drivers.web_driver:WebDriver"


@click.command("tui")
@click.option("--replay", is_flag=True,
              help="Open in replay mode: step through the session's events (←/→, Home/End, "
                   "[ ] between status changes), read-only, and fork from any of them.")
@click.option("--web", is_flag=True,
              help="Serve the board to a browser (textual-serve) instead of this terminal; "
                   "prints the URL to open, with its token.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="--web: address to listen on. Prefer 127.0.0.1 and an SSH tunnel "
                   "(docs/tui.md).")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True,
              help="--web: port to listen on.")
@click.option("--token", envvar="HARNESS_WEB_TOKEN", default=None,
              help="--web: the token the page must present (default: a new random one; "
                   "env HARNESS_WEB_TOKEN).")
@click.option("--no-token", is_flag=True,
              help="--web on a loopback address only: serve without a token (any user of "
                   "this host can then open the board).")
@common_options
def tui(replay: bool, web: bool, host: str, port: int, token: str | None,
        no_token: bool) -> None:
    """Open the board of the current session in the terminal UI.

    Watch progress live (changes by agents, the runner or the CLI show within half a
    second), mark and reprioritise todos (every change is an event with actor `human`,
    as from the CLI), read each todo's history, runs, live log and verification results,
    and replay the session. `?` lists the keys; they can be remapped in
    `<config dir>/tui.toml` (see `harness where` and docs/tui.md).

    `--web` serves the same board to a browser tab (one app per tab, through textual-serve)
    on 127.0.0.1:8765, behind a token that is printed with the URL. From another machine,
    tunnel rather than bind wider: `ssh -L 8765:127.0.0.1:8765 gpu-box`, then open the
    printed URL here. Another `--host` keeps the token (there is no TLS: the token crosses
    the network in clear text).
    """
    h = harness()
    session = h.session()
    if web:
        _serve_web(h.store_source.value, session.name, host=host, port=port, token=token,
                   no_token=no_token, replay=replay)
        return
    # The one place the harness imports the TUI; lazily, so other commands stay light.
    from tui.keys import load_keymap

    keymap = load_keymap()  # a broken config is reported even where no terminal is
    under_web = os.environ.get("TEXTUAL_DRIVER") == _WEB_DRIVER
    if not under_web and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("harness tui needs a terminal",
                         hint="use `harness list` or `harness list --json` in scripts")
    from tui.app import HarnessApp

    app = HarnessApp(h.store, session.id, replay=replay, keymap=keymap)
    app.run()
    # Let the store thread finish before the CLI closes the store under it.
    app.io.stopped.wait(2.0)
    if app.crash is not None:  # one line here; the traceback went to the log it names
        raise HarnessError(app.crash.message(), hint=app.crash.hint())


def _serve_web(store: str, session: str, *, host: str, port: int, token: str | None,
               no_token: bool, replay: bool) -> None:
    try:
        from tui.web import WebBoard, is_loopback, new_token
    except ImportError as exc:  # textual-serve and aiohttp are core dependencies
        raise HarnessError(f"harness tui --web cannot start ({exc})",
                           hint="reinstall todo-harness: textual-serve is missing") from None
    if replay:
        raise UsageError("--replay and --web do not go together",
                         hint="open the web board and press the replay key there")
    if no_token and token:
        raise UsageError("--token and --no-token do not go together")
    if no_token and not is_loopback(host):
        raise UsageError(f"--no-token is refused on {host}: only a loopback address may be "
                         "served without a token", hint="keep the token, or use --host "
                         "127.0.0.1 and an SSH tunnel (docs/tui.md)")
    if token is not None and len(token) < 16:
        raise UsageError("--token is too short: use at least 16 characters",
                         hint="leave it out and a random one is made")
    secret = None if no_token else (token or new_token())
    env = {"HARNESS_DB": store, "HARNESS_SESSION": session}

    def listening(urls: list[str]) -> None:
        # Once the port is bound: only URLs that open the board, each with its token.
        wildcard = host in ("", "0.0.0.0", "::")
        click.echo(f"serving session {session!r} (Ctrl-C stops it)"
                   + ("; on every address: from elsewhere use this host's name in the URL"
                      if wildcard else ""), err=True)
        for url in urls:
            click.echo(f"open: {url}")

    board = WebBoard(host=host, port=port, token=secret, title=f"harness: {session}", env=env,
                     listening=listening)
    try:
        board.serve()
    except OSError as exc:
        raise HarnessError(f"cannot listen on {host}:{port} ({exc.strerror or exc})",
                           hint="choose another --port, or stop what holds it") from None
    # Stopping the server is how it ends, yet the shell is told how it was stopped:
    # 130 for Ctrl-C, 143 for SIGTERM (README, "Exit codes").
    if board.stopped_by == signal.SIGINT:
        raise Interrupted("interrupted: the board is no longer served")
    if board.stopped_by is not None:
        raise Terminated(f"terminated ({board.stopped_by.name}): the board is no longer "
                         "served", signum=int(board.stopped_by))


def register(cli: click.Group) -> None:
    cli.add_command(tui)
