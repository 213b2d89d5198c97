"""Make docs/tui.png (or docs/tui-charts.png): the TUI on a realistic mid-campaign
session, via Textual's own screenshot (SVG) converted with rsvg-convert (Debian:
librsvg2-bin).

    python scripts/tui_screenshot.py [--charts] [--out docs/tui.png] [--keep-svg]

The session is tests/tui/campaign.py's (fixed times): data stages done, the checkpoint
blocked by its gate after two verifications, training running again. The blocked todo is
selected with its verification results open; with --charts, the training todo's chart
screen (`c`: every chart, both runs overlaid).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from state.store import Store  # noqa: E402
from tests.tui.campaign import NOW, build  # noqa: E402
from tui.app import HarnessApp  # noqa: E402
from tui.widgets.board import Board  # noqa: E402


async def shoot(svg: Path, charts: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(str(Path(tmp) / "state.db"))
        sid = build(store)
        app = HarnessApp(store, sid, clock=lambda: NOW)
        async with app.run_test(size=(150, 42)) as pilot:
            await app.settled()
            app.screen.query_one(Board).select(6 if charts else 8)
            await pilot.pause()
            await app.settled()
            await pilot.press("c" if charts else "3")
            await app.settled()
            await pilot.pause()
            app.save_screenshot(filename=svg.name, path=str(svg.parent))
        store.close()


def chromium_png(svg: Path, out: Path) -> None:
    """The SVG drawn by Debian's Chromium (through Playwright, a dev dependency): librsvg
    draws braille, the charts' dots, from a fallback font of another width."""
    from playwright.sync_api import sync_playwright

    width, height = (int(float(x)) for x in re.findall(
        r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg.read_text())[0])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium")
                                     or "/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(svg.resolve().as_uri())
            page.screenshot(path=str(out))
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charts", action="store_true",
                        help="the chart screen (default out: docs/tui-charts.png)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep-svg", action="store_true")
    args = parser.parse_args()
    args.out = args.out or ROOT / "docs" / ("tui-charts.png" if args.charts else "tui.png")
    if not args.charts and shutil.which("rsvg-convert") is None:
        sys.exit("error: rsvg-convert not found (hint: apt-get install librsvg2-bin)")
    svg = args.out.with_suffix(".svg")
    asyncio.run(shoot(svg, args.charts))
    if args.charts:
        chromium_png(svg, args.out)
    else:
        # librsvg drops leading no-break spaces inside a <text> with textLength, which
        # shifts words; plain spaces with xml:space="preserve" draw the same cells.
        text = svg.read_text().replace("&#160;", " ").replace(
            "<svg ", '<svg xml:space="preserve" ', 1)
        svg.write_text(text)
        subprocess.run(["rsvg-convert", "--zoom", "1.0", str(svg), "-o", str(args.out)],
                       check=True)
    if not args.keep_svg:
        svg.unlink()
    print(args.out)


if __name__ == "__main__":
    main()
