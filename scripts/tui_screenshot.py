"""Make docs/tui.png: the TUI on a realistic mid-campaign session, via Textual's own
screenshot (SVG) converted with rsvg-convert (Debian: librsvg2-bin).

    python scripts/tui_screenshot.py [--out docs/tui.png] [--keep-svg]

The session is tests/tui/campaign.py's (fixed times): data stages done, the checkpoint
blocked by its gate after two verifications, training running again. The blocked todo is
selected with its verification results open.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def shoot(svg: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(str(Path(tmp) / "state.db"))
        sid = build(store)
        app = HarnessApp(store, sid, clock=lambda: NOW)
        async with app.run_test(size=(150, 42)) as pilot:
            await app.settled()
            app.screen.query_one(Board).select(8)
            await pilot.press("3")
            await app.settled()
            await pilot.pause()
            app.save_screenshot(filename=svg.name, path=str(svg.parent))
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "tui.png")
    parser.add_argument("--keep-svg", action="store_true")
    args = parser.parse_args()
    if shutil.which("rsvg-convert") is None:
        sys.exit("error: rsvg-convert not found (hint: apt-get install librsvg2-bin)")
    svg = args.out.with_suffix(".svg")
    asyncio.run(shoot(svg))
    # librsvg drops leading no-break spaces inside a <text> with textLength, which shifts
    # words; plain spaces with xml:space="preserve" draw the same cells.
    text = svg.read_text().replace("&#160;", " ").replace("<svg ", '<svg xml:space="preserve" ', 1)
    svg.write_text(text)
    subprocess.run(["rsvg-convert", "--zoom", "1.0", str(svg), "-o", str(args.out)], check=True)
    if not args.keep_svg:
        svg.unlink()
    print(args.out)


if __name__ == "__main__":
    main()
