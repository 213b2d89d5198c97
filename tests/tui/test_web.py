"""`harness tui --web` as a person uses it: the server started as a real process, the board
opened in Debian's headless Chromium (driven by Playwright, no browser download), keys
typed into the page, the store checked, and a write from another process seen on the page.

The page draws the terminal on a canvas, so the screen is read from what the page was
sent: every binary websocket frame the browser received is fed, in order, to a VT emulator
(pyte) of the size the page asked for. The screenshot shows the same thing drawn.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import ROOT
from tests.tui.conftest import Campaign

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "test-token-0123456789abcdef"
# As the machine's own probe starts it: without the background-networking flags Chromium
# tries hosts it cannot reach, many at a time.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]

pytestmark = [pytest.mark.slow]


def _need_browser() -> None:
    if not Path(CHROMIUM).is_file():
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing in CI (scripts/test installs Debian's chromium)")
        pytest.skip("Chromium is not installed (scripts/test installs Debian's chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
    pytest.importorskip("pyte", reason="pyte is a dev dependency")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    return env


class WebServer:
    def __init__(self, campaign: Campaign, *args: str):
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "--db", str(campaign.path), "--session",
             campaign.name, "tui", "--web", "--port", str(self.port), *args],
            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, text=True)
        # What it prints, as it prints it (stdout and stderr in one list, line by line).
        self.printed: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(pipe,), daemon=True)
                         for pipe in (self.proc.stdout, self.proc.stderr)]
        for reader in self._readers:
            reader.start()
        deadline = time.monotonic() + 90  # a busy 2-core machine starts Python slowly
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                for reader in self._readers:
                    reader.join(10)
                raise AssertionError(f"the server exited {self.proc.returncode}: "
                                     f"{self.printed!r}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("the server did not listen within 90 s")

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            self.printed.append(line.rstrip("\n"))

    def banner(self) -> list[str]:
        """What it printed once listening (it says `open:` last, when the port is bound)."""
        deadline = time.monotonic() + 30
        while not any(line.startswith("open: ") for line in self.printed):
            assert time.monotonic() < deadline, f"no `open:` line: {self.printed!r}"
            time.sleep(0.1)
        time.sleep(0.5)  # anything printed right after it
        return list(self.printed)

    @property
    def url(self) -> str:
        """The URL the banner gives (the one a person copies into the browser)."""
        (url,) = [line.removeprefix("open: ") for line in self.banner()
                  if line.startswith("open: ")]
        return url

    def request(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        status, headers_, _body = self.get(path, headers)
        return status, headers_

    def get(self, path: str, headers: dict[str, str] | None = None
            ) -> tuple[int, Any, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 2)  # Ctrl-C: textual-serve stops its apps and exits
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


@pytest.fixture
def server(campaign: Campaign) -> Iterator[WebServer]:
    s = WebServer(campaign, "--token", TOKEN)
    try:
        yield s
    finally:
        s.stop()


class PageScreen:
    """The terminal as the page was sent it, rebuilt by a VT emulator."""

    def __init__(self) -> None:
        import pyte

        self._pyte = pyte
        self.screen: Any = None
        self.stream: Any = None
        self.pending: list[bytes] = []

    def attach(self, ws: Any) -> None:
        query = parse_qs(urlsplit(ws.url).query)
        cols, rows = int(query["width"][0]), int(query["height"][0])
        self.screen = self._pyte.Screen(cols, rows)
        self.stream = self._pyte.ByteStream(self.screen)
        ws.on("framereceived", self._received)
        ws.on("framesent", self._sent)

    def _received(self, payload: Any) -> None:
        if isinstance(payload, bytes):
            self.stream.feed(payload)

    def _sent(self, payload: Any) -> None:
        if isinstance(payload, str) and payload.startswith('["resize"'):
            size = json.loads(payload)[1]
            self.screen.resize(lines=size["height"], columns=size["width"])

    def text(self) -> str:
        return "\n".join(self.screen.display) if self.screen is not None else ""


def _open_board(pw: Any, server: WebServer, screen: PageScreen,
                requested: list[str] | None = None) -> tuple[Any, Any]:
    """Chromium with the board's page open, its terminal read into ``screen`` (and every
    URL the page asks for into ``requested``)."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("websocket", screen.attach)
        if requested is not None:
            page.on("request", lambda request: requested.append(request.url))
        page.goto(server.url)  # as printed: with the token
    except BaseException:
        browser.close()
        raise
    return browser, page


def _wait(page: Any, condition: Callable[[], bool], what: str, shown: Callable[[], str],
          timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        page.wait_for_timeout(100)  # lets Playwright deliver the frames
    raise AssertionError(f"the page never showed {what}:\n{shown()}")


def test_the_board_in_chromium_marks_a_todo_and_shows_another_process_write(
        server: WebServer, campaign: Campaign, tmp_path: Path) -> None:
    _need_browser()
    from playwright.sync_api import sync_playwright

    store, sid = campaign.store, campaign.session_id
    screen = PageScreen()
    requested: list[str] = []
    with sync_playwright() as pw:
        browser, page = _open_board(pw, server, screen, requested)
        try:
            _wait(page, lambda: "Pending (3)" in screen.text() and "6/11 done" in screen.text(),
                  "the board", screen.text, timeout=120)
            # everything the page loaded (its font too) came from the server: it works
            # on a machine without internet access
            assert requested and {urlsplit(u).netloc for u in requested} == {
                f"127.0.0.1:{server.port}"}, requested
            assert any(u.endswith(".ttf") for u in requested), requested
            page.click("#terminal")
            # The board opens on t6 (in progress); down twice is t11, pending.
            page.keyboard.press("j")
            _wait(page, lambda: "t9  ○ pending" in screen.text(), "t9's detail", screen.text)
            page.keyboard.press("j")
            _wait(page, lambda: "t11  ○ pending" in screen.text(), "t11's detail", screen.text)
            page.keyboard.press("d")
            _wait(page, lambda: "7/11 done" in screen.text(), "t11 completed", screen.text)
            assert store.todo(sid, 11).status == "completed"
            last = store.events(sid)[-1]
            assert (last.kind, last.todo_id, last.actor) == ("todo.updated", 11, "human")

            subprocess.run([sys.executable, "-m", "harness", "--db", str(campaign.path),
                            "--session", campaign.name, "add", "written by another process"],
                           cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=120)
            _wait(page, lambda: "written by another process" in screen.text(),
                  "the other process's todo", screen.text)
            shot = Path(os.environ.get("HARNESS_WEB_SCREENSHOT") or tmp_path / "web.png")
            page.screenshot(path=str(shot))
            assert shot.stat().st_size > 10_000  # a drawn board, not a blank page
        finally:
            browser.close()


def test_the_charts_in_chromium(server: WebServer, campaign: Campaign, tmp_path: Path) -> None:
    """The running training's loss curve in the Detail tab, then every chart with both
    runs overlaid (c), drawn on the page as in a terminal."""
    _need_browser()
    from playwright.sync_api import sync_playwright

    screen = PageScreen()
    braille = lambda: sum(0x2801 <= ord(c) < 0x2900 for c in screen.text())  # noqa: E731
    with sync_playwright() as pw:
        browser, page = _open_board(pw, server, screen)
        try:
            # the board opens on t6, the training that runs: its loss curve is in Detail
            _wait(page, lambda: "loss by step" in screen.text() and braille() > 10,
                  "the training's loss chart", screen.text, timeout=120)
            page.click("#terminal")
            page.keyboard.press("c")
            _wait(page, lambda: "2 runs overlaid: r6, r10" in screen.text()
                  and "heldout_acc by epoch" in screen.text() and braille() > 30,
                  "the chart screen", screen.text)
            shot = Path(os.environ.get("HARNESS_WEB_CHARTS_SCREENSHOT")
                        or tmp_path / "web-charts.png")
            page.screenshot(path=str(shot))
            assert shot.stat().st_size > 10_000
            page.keyboard.press("Escape")
            _wait(page, lambda: "Pending (3)" in screen.text(), "the board again",
                  screen.text)
        finally:
            browser.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_the_banner_shows_only_urls_that_work_each_with_its_token(campaign: Campaign,
                                                                  host: str) -> None:
    """textual-serve's own banner (its URL has no token: 403) is not shown; every URL the
    server prints opens the board, and none is printed before the port is bound."""
    server = WebServer(campaign, "--token", TOKEN, "--host", host)
    try:
        lines = server.banner()
        urls = [w.rstrip(".,;:)") for line in lines for w in line.split()
                if w.startswith("http")]
        assert urls == [f"http://127.0.0.1:{server.port}/?token={TOKEN}"], lines
        for url in urls:
            parts = urlsplit(url)
            assert server.request(f"{parts.path}?{parts.query}")[0] == 200
        assert not [line for line in lines if "Serving" in line or "textual" in line.lower()]
        assert any(line.startswith(f"serving session {campaign.name!r}") for line in lines)
        time.sleep(0.5)
        # the token is printed once, in its URL: no access log repeats it
        assert [line for line in server.printed if TOKEN in line] == [f"open: {urls[0]}"]
    finally:
        server.stop()


def _ws_headers(origin: str, cookie: str | None) -> dict[str, str]:
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
               "Origin": origin}
    if cookie:
        headers["Cookie"] = cookie
    return headers


def test_the_page_and_its_websocket_need_the_token_and_the_same_origin(
        server: WebServer) -> None:
    assert server.request("/")[0] == 403
    assert server.request("/?token=wrong-token-wrong-token")[0] == 403
    status, headers = server.request(f"/?token={TOKEN}")
    assert status == 200
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert server.request("/static/js/textual.js")[0] == 200
    same = f"http://127.0.0.1:{server.port}"
    auth = f"harness_web={TOKEN}"
    assert server.request("/ws", _ws_headers(same, None))[0] == 403
    assert server.request("/ws", _ws_headers("http://evil.example", auth))[0] == 403
    assert server.request("/ws", _ws_headers(same, auth))[0] == 101


def test_the_page_asks_no_other_site_for_its_font(server: WebServer) -> None:
    status, _headers, body = server.get(f"/?token={TOKEN}")
    assert status == 200
    page = body.decode()
    assert "googleapis" not in page and "gstatic" not in page
    fonts = re.findall(r'url\("([^"]+\.ttf)"\)', page)
    assert len(fonts) == 2, page[:2000]  # Roboto Mono, upright and italic
    for url in fonts:
        parts = urlsplit(url)
        assert parts.netloc == f"127.0.0.1:{server.port}", url
        status, _headers, data = server.get(parts.path)  # static: no token needed
        assert status == 200 and len(data) > 10_000, (url, status)


@pytest.mark.parametrize(("args", "message"), [
    (["--host", "0.0.0.0", "--no-token"], "--no-token is refused on 0.0.0.0"),
    (["--token", "short"], "--token is too short"),
    (["--replay"], "--replay and --web do not go together"),
])
def test_bad_web_options_are_one_line_errors(campaign: Campaign, args: list[str],
                                             message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "harness", "--db", str(campaign.path), "tui",
                        "--web", *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_port_in_use_is_one_line(campaign: Campaign) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "harness", "--db", str(campaign.path), "tui",
                            "--web", "--port", str(port)], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot listen on 127.0.0.1:") and "Traceback" not in r.stderr
