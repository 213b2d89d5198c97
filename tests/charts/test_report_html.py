"""`harness report --html`: one self-contained page, opened in Debian's headless Chromium
from file:// with every other request refused, its charts drawn, its tables there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from state.series import SeriesPoint
from state.store import Store
from tests.conftest import ROOT
from tests.tui.campaign import at, build
from tests.tui.test_web import CHROMIUM, CHROMIUM_ARGS, _env, _need_browser

pytestmark = [pytest.mark.sqlite]

SERVED_TABLE = [
    {"concurrency": c, "plain_tok_s": plain, "spec_tok_s": spec, "speedup": spec / plain,
     "plain_tpot_ms": 1000 / plain, "spec_tpot_ms": 1000 / spec, "tau": 3.1,
     "per_position": [0.81, 0.69, 0.61]}
    for c, plain, spec in ((1, 160.0, 227.0), (8, 900.0, 1080.0), (32, 2400.0, 2330.0))]


def campaign_with_a_benchmark(path: Path) -> str:
    """The TUI's campaign, with the benchmark todo run: its served table and its series."""
    store = Store.open(str(path))
    sid = build(store)
    name = store.session_by_id(sid).name  # type: ignore[union-attr]
    with store.write(sid, "runner") as tx:
        run = tx.queue_run(todo_id=10, host="gpu", stage="benchmark", ts=at(370))
        tx.update_run(run.id, state="succeeded", exit_code=0, started_at=at(370),
                      ended_at=at(371), ts=at(371))
        tx.append_points([SeriesPoint(run_id=run.id, start=i, metric="speedup",
                                      axis="concurrency", x=row["concurrency"],
                                      y=row["speedup"], ts=at(371))
                          for i, row in enumerate(SERVED_TABLE)])
        tx.record_verification(
            todo_id=10, run_id=run.id, ts=at(371), kind="eagle3.benchmark", passed=False,
            verdict="gate failed: c=32: 0.97x", checks=[], gate={},
            metrics={"speedup_c1": 1.42, "speedup_c8": 1.2, "speedup_c32": 0.97,
                     "acceptance_length": 3.1, "served_table": SERVED_TABLE})
    store.close()
    return name


def test_the_report_is_one_self_contained_page(tmp_path: Path, db_path: Path) -> None:
    name = campaign_with_a_benchmark(db_path)
    page = tmp_path / "report.html"
    r = subprocess.run([sys.executable, "-m", "harness", "--db", str(db_path), "--session",
                        name, "report", "--html", str(page)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{page}: session {name}")
    html = page.read_text()
    # nothing from elsewhere: no script, no linked style, font or image
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!#)""", html)
    assert "url(" not in html
    for section in ("Board", "Charts", "Verifications", "Served", "History"):
        assert f">{section}" in html
    # the running training (loss, lr, held-out accuracy) and the benchmark (speedup)
    assert re.findall(r'<div class="chart" data-metric="(\w+)"', html) == [
        "loss", "lr", "heldout_acc", "speedup"]
    assert "Train the EAGLE-3 drafter (3 TTT steps, 5 epochs)" in html


@pytest.mark.slow
def test_the_report_in_chromium_offline(tmp_path: Path, db_path: Path) -> None:
    _need_browser()
    from playwright.sync_api import sync_playwright

    name = campaign_with_a_benchmark(db_path)
    page_path = tmp_path / "report.html"
    r = subprocess.run([sys.executable, "-m", "harness", "--db", str(db_path), "--session",
                        name, "report", "--html", str(page_path)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    asked: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900},
                                          offline=True)

            def refuse(route) -> None:  # type: ignore[no-untyped-def]
                asked.append(route.request.url)
                if route.request.url.startswith("file://"):
                    route.continue_()
                else:
                    route.abort()
            context.route("**/*", refuse)
            page = context.new_page()
            page.goto(page_path.as_uri())
            page.wait_for_load_state("load")
            assert asked == [page_path.as_uri()]  # the page alone: nothing else was asked for
            charts = page.locator("div.chart svg")
            assert charts.count() == 4
            for i in range(charts.count()):
                box = charts.nth(i).bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 150
            # each chart drew its data: lines (or bars) with real geometry, one per series
            drawn = page.evaluate("""() => [...document.querySelectorAll('div.chart')].map(
                c => [c.dataset.metric, new Set([...c.querySelectorAll('g.series')].filter(
                    g => [...g.querySelectorAll('path, rect, circle')].some(
                        p => p.getBBox().width > 0 || p.getBBox().height > 0)).map(
                    g => [...g.classList].find(n => n.startsWith('serie-')))).size])""")
            assert drawn == [["loss", 1], ["lr", 1], ["heldout_acc", 3], ["speedup", 1]]
            text = page.inner_text("body")
            assert "Blocked (1)" in text and "FAILED" in text
            assert "1.42x" in text  # the served table
            assert "loss by step" in page.inner_html("div.chart")
            # HARNESS_REPORT_SCREENSHOT=docs/report.png keeps the pictures (and
            # docs/report-charts.png, the training's charts alone)
            shot = Path(os.environ.get("HARNESS_REPORT_SCREENSHOT") or tmp_path / "report.png")
            page.set_viewport_size({"width": 1400, "height": 1750})
            page.screenshot(path=str(shot))
            charts_shot = shot.with_name(f"{shot.stem}-charts.png")
            page.locator("div.charts").first.screenshot(path=str(charts_shot))
            assert shot.stat().st_size > 50_000 and charts_shot.stat().st_size > 20_000
        finally:
            browser.close()
