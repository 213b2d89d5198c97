"""``harness tui --web``: the same board in a browser tab, served by textual-serve.

textual-serve runs one copy of the app per browser connection, as a child process whose
terminal is a websocket. We add what it leaves to its user:

- **a token**: the page, its websocket and downloads need it (a query parameter once, then
  an HttpOnly cookie). Loopback is no privacy on a shared GPU host (every local user can
  reach 127.0.0.1), so there is a token unless it is turned off, which only a loopback
  address allows;
- **same-origin websockets**: a page from another site open in the same browser must not
  be able to drive the board (the browser sends cookies with a cross-site websocket);
- **URLs from the request**: the page is told to connect back to the host and port the
  browser used, so an SSH tunnel to another local port works;
- **no request to another site**: the page's font comes from the server's own static files,
  not Google Fonts, so the board works on a machine without internet access;
- **a banner of URLs that work**: textual-serve prints its own, with a URL that has no
  token (it answers 403), before the port is even bound. Ours replaces it, printed once
  the port listens: each URL with its token (:meth:`WebBoard.urls`).

The store and session reach the children through ``HARNESS_DB``/``HARNESS_SESSION`` in
their environment, not their command line, where other users of the host could read a
database password.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import os
import re
import secrets
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from textual_serve.server import Server

__all__ = ["COOKIE", "WebBoard", "is_loopback", "local_font", "new_token"]

COOKIE = "harness_web"
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def child_command(python: str = sys.executable) -> str:
    """What textual-serve starts per connection (through a shell: it takes a string)."""
    return shlex.join([python, "-m", "harness", "tui"])


class WebBoard(Server):
    """textual-serve's server, with the token and origin checks in front of it."""

    def __init__(self, *, host: str, port: int, token: str | None, title: str,
                 env: dict[str, str], listening: Callable[[list[str]], None] | None = None):
        os.environ.update(env)  # the children inherit the server's environment
        super().__init__(child_command(), host=host, port=port, title=title)
        self.token = token
        self._listening = listening
        #: the signal that stopped serving (SIGINT for Ctrl-C), for the exit code
        self.stopped_by: signal.Signals | None = None

    def urls(self) -> list[str]:
        """The URLs a browser can open, each with the token: the address served, or for a
        wildcard address (0.0.0.0, ::) the loopback one (the host's own names depend on
        how others reach it)."""
        host = self.host
        if host in ("", "0.0.0.0"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        shown = f"[{host}]" if ":" in host else host
        return [f"http://{shown}:{self.port}/" + (f"?token={self.token}" if self.token else "")]

    async def on_startup(self, app: web.Application) -> None:
        """Nothing: textual-serve's banner would show a URL without the token."""

    def serve(self, debug: bool = False) -> None:
        """As textual-serve serves (Ctrl-C and SIGTERM end it gracefully), with our banner
        printed once every socket is bound, through run_app's ``print``."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop, sig)
        # No access log: its lines would repeat the token of every request's URL.
        web.run_app(self._make_app(), host=self.host, port=self.port, handle_signals=False,
                    loop=loop, print=self._bound, access_log=None)

    def _stop(self, sig: signal.Signals) -> None:
        if self.stopped_by is None:
            self.stopped_by = sig
        self.request_exit()

    def _bound(self, _aiohttp_banner: str) -> None:
        if self._listening is not None:
            self._listening(self.urls())

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._guard)
        return app

    def _token_ok(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        return hmac.compare_digest(given.encode(), self.token.encode())

    @web.middleware
    async def _guard(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        path = request.path
        if path.startswith("/static/"):
            return await handler(request)  # textual-serve's own scripts and fonts
        if not self._token_ok(request):
            return web.Response(status=403, text="harness tui --web: open the URL with its "
                                "token (printed when the server started)\n")
        if path == "/ws" and not _same_origin(request):
            return web.Response(status=403, text="harness tui --web: cross-origin websocket "
                                "refused\n")
        response = await handler(request)
        if self.token is not None and request.query.get("token"):
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
        return response

    async def handle_index(self, request: web.Request) -> Any:
        # The page must connect back where the browser is (a tunnel's local port, say),
        # not where the server bound: textual-serve builds its URLs from public_url.
        self.public_url = f"{request.scheme}://{request.host}"
        response = await super().handle_index(request)
        if isinstance(response, web.Response) and response.text:
            response.text = local_font(response.text, f"{self.public_url}/static/")
        return response


# textual-serve's page asks Google Fonts for Roboto Mono, which a machine without internet
# access (or a careful user) never reaches; the same font ships in its static folder.
_GOOGLE_FONT = re.compile(r"<link\b[^>]*fonts\.googleapis\.com[^>]*>", re.IGNORECASE)
_FONT_FILES = (("normal", "RobotoMono-VariableFont_wght.ttf"),
               ("italic", "RobotoMono-Italic-VariableFont_wght.ttf"))


def local_font(page: str, static_url: str) -> str:
    """``page`` with its Google Fonts link replaced by the same font from ``static_url``."""
    faces = "".join(
        f'@font-face {{ font-family: "Roboto Mono"; font-style: {style}; '
        f'font-weight: 100 700; src: url("{static_url}fonts/{name}") format("truetype"); }}'
        for style, name in _FONT_FILES)
    return _GOOGLE_FONT.sub(lambda _m: f"<style>{faces}</style>", page)


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return True  # not a browser (browsers always send Origin on websockets)
    return urlsplit(origin).netloc == request.host
