"""Make docs/report.png and docs/report-charts.png: `harness report --html` of a store's
session, drawn by Debian's Chromium (through Playwright, a dev dependency).

    python scripts/report_screenshot.py [--db PATH] [--session NAME] [--out docs/report.png]

The pictures in docs/ are of the README's main job (`harness run examples/eagle3-tiny.yaml`,
session `default` of its store): the whole page, and the train stage's charts alone
(report-charts.png, the README's picture).
"""

from __future__ import annotations

import argparse
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
            finally:
                browser.close()
    print(args.out)


if __name__ == "__main__":
    main()
