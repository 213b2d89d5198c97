"""Make docs/report.png, docs/report-charts.png and docs/plot.png: `harness report --html`
and `harness plot` of a store's session, drawn by Debian's Chromium (through Playwright, a
dev dependency).

    python scripts/report_screenshot.py [--db PATH] [--session NAME] [--out docs/report.png]

The pictures in docs/ are of the README's main job (`harness run examples/eagle3-tiny.yaml`,
session `default` of its store): the report's first screen, the train stage's charts alone
(report-charts.png, the README's picture), and `harness plot train loss heldout_acc` in a
100-column terminal (plot.png).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="the store (default: as harness finds it)")
    parser.add_argument("--session", default="default")
    parser.add_argument("--stage", default="train", help="whose charts go in -charts.png")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "report.html"
        where = ["--db", args.db] if args.db else []
        subprocess.run([sys.executable, "-m", "harness", *where, "--session", args.session,
                        "report", "--html", str(page_path)], check=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium")
                                         or "/usr/bin/chromium", headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1800})
                page.goto(page_path.as_uri())
                page.screenshot(path=str(args.out))
                heading = page.locator(f"h3[id^=charts-]:has-text(' {args.stage} r')")
                heading.first.locator("xpath=following-sibling::div[1]").screenshot(
                    path=str(args.out.with_name(f"{args.out.stem}-charts.png")))
                plot_png(page, where, args, Path(tmp))
            finally:
                browser.close()
    print(args.out)


def plot_png(page: object, where: list[str], args: argparse.Namespace, tmp: Path) -> None:
    """`harness plot`, in colour, as a terminal shows it (Rich draws the terminal)."""
    from rich.console import Console
    from rich.text import Text

    out = subprocess.run([sys.executable, "-m", "harness", *where, "--session", args.session,
                          "plot", args.stage, "loss", "heldout_acc", "--color", "--width",
                          "100", "--height", "16"], check=True, capture_output=True,
                         text=True).stdout
    console = Console(record=True, width=100, file=open(os.devnull, "w"),  # noqa: SIM115
                      force_terminal=True, color_system="256")
    console.print(Text.from_ansi(f"$ harness plot {args.stage} loss heldout_acc\n" + out))
    svg = tmp / "plot.svg"
    text = console.export_svg(title="harness plot")
    svg.write_text(text)
    width, height = (math.ceil(float(x)) for x in re.findall(
        r'viewBox="0 0 ([\d.]+) ([\d.]+)"', text)[0])
    page.set_viewport_size({"width": width, "height": height})  # type: ignore[attr-defined]
    page.goto(svg.as_uri())  # type: ignore[attr-defined]
    page.screenshot(path=str(args.out.with_name("plot.png")))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
