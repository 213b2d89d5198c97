"""Charts in the TUI, through its pilot: the training todo's main chart in the Detail tab
(and following new points live), the chart screen with every metric and both runs
overlaid (opened by a remappable key), the served speedup chart in the verification
panel, and all of it readable at 80x24."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from state.series import SeriesPoint
from state.store import Store
from tests.tui.campaign import NOW, at
from tests.tui.conftest import Campaign
from tests.tui.test_bindings import select
from tests.tui.test_live import wait_until
from tests.tui.test_served_beside_offline import _text, record
from tests.tui.test_small_terminal import screen_text
from tests.tui.test_snapshots import SIZE, SMALL, ready
from tui.app import HarnessApp
from tui.screens.charts import ChartScreen
from tui.widgets.chart import SeriesChart
from tui.widgets.logtail import LogTail
from tui.widgets.verification import VerificationPanel

pytestmark = pytest.mark.anyio

BRAILLE = range(0x2801, 0x2900)


def drawn(text: str) -> int:
    """How many cells of ``text`` are braille dots (a line plotext drew)."""
    return sum(ord(c) in BRAILLE for c in text)


def running_train(store: Store, sid: int) -> int:
    return next(r.id for r in store.runs(sid, todo_id=6) if r.state == "running")


@pytest.mark.parametrize("size", [SMALL, SIZE])
async def test_the_detail_tab_shows_the_stages_main_chart(campaign: Campaign,
                                                          size: tuple[int, int]) -> None:
    app = campaign.app()
    async with app.run_test(size=size) as pilot:
        await select(app, pilot, 6)
        await pilot.pause()
        chart = app.screen.query_one("#detail-chart", SeriesChart)
        assert chart.display and chart.chart is not None
        assert chart.chart.metric == "loss"  # train's main chart, of the run that runs
        assert [line.xs[-1] for line in chart.chart.lines] == [1650]
        pane = "\n".join(ln.split("▕", 1)[1] for ln in screen_text(app).splitlines()
                         if "▕" in ln)
        assert "loss by step" in pane and "c: all 3" in pane
        assert drawn(pane) >= 10  # the curve is on screen, not just its caption
        if size == SIZE:
            assert "r10 running" in pane  # a wide pane names the run it follows

        await select(app, pilot, 8)  # a verify todo whose runs recorded nothing
        await pilot.pause()
        assert not app.screen.query_one("#detail-chart", SeriesChart).display
        assert "by step" not in screen_text(app)


async def test_the_chart_follows_a_running_stage_live(campaign: Campaign) -> None:
    store, sid = campaign.store, campaign.session_id
    app = campaign.app()
    async with app.run_test(size=SIZE) as pilot:
        await select(app, pilot, 6)
        chart = app.screen.query_one("#detail-chart", SeriesChart)
        run = running_train(store, sid)
        with store.write(sid, "runner") as tx:  # what the runner stores as the log streams
            tx.append_points([SeriesPoint(run_id=run, start=1000 + i, metric="loss",
                                          axis="step", x=x, y=y, ts=at(372))
                              for i, (x, y) in enumerate([(1850, 2.21), (2050, 2.18)])])
        assert await wait_until(pilot, lambda: chart.chart is not None
                                and chart.chart.lines[0].xs[-1] == 2050)
        assert chart.chart.lines[0].ys[-2:] == (2.21, 2.18)
        # the points' lines are for the charts: the Log tab does not show them
        _, end = store.log(run)
        with store.write(sid, "runner") as tx:
            tx.append_log(run, end, '\n@series {"metric": "loss", "x": 2250, "y": 2.1}\n'
                                    "epoch 2/5  step 800/1250  loss 2.20\n")
        await pilot.press("2")
        log = app.screen.query_one(LogTail)
        assert await wait_until(pilot, lambda: "epoch 2/5  step 800/1250  loss 2.20"
                                in log.lines)
        assert not any("@series" in line for line in log.lines)


@pytest.mark.parametrize("size", [SMALL, SIZE])
async def test_the_chart_key_opens_every_chart_with_the_runs_overlaid(
        campaign: Campaign, size: tuple[int, int]) -> None:
    app = campaign.app(keymap={"view.charts": "v"})  # remapped by its binding id
    async with app.run_test(size=size) as pilot:
        await select(app, pilot, 6)
        await pilot.press("v")
        await app.settled()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ChartScreen) and screen.num == 6
        charts = {c.chart.metric: c.chart for c in screen.query(SeriesChart)
                  if c.chart is not None}
        assert list(charts) == ["loss", "heldout_acc", "lr"]  # the main chart first
        assert [line.name for line in charts["loss"].lines] == ["r6", "r10"]
        assert [line.name for line in charts["heldout_acc"].lines] == [
            "r6 position 1", "r6 position 2", "r6 position 3",
            "r10 position 1", "r10 position 2", "r10 position 3"]
        text = screen_text(app)
        assert "2 runs overlaid: r6, r10" in text and "loss by step" in text
        assert drawn(text) >= 20
        assert "esc Board" in text.splitlines()[-1]  # how to go back, in the footer
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ChartScreen)


async def test_the_chart_screen_of_a_todo_without_series_says_so(campaign: Campaign) -> None:
    app = campaign.app()
    async with app.run_test(size=SMALL) as pilot:
        await select(app, pilot, 9)
        await pilot.press("c")
        await app.settled()
        await pilot.pause()
        assert "No series recorded for this todo yet" in screen_text(app)
        assert not list(app.screen.query(SeriesChart))


@pytest.mark.sqlite
async def test_the_verification_panel_charts_the_served_speedup(db_path: Path) -> None:
    store = Store.open(str(db_path))
    sid, _v, b = record(store)
    app = HarnessApp(store, sid, clock=lambda: NOW)
    for size, beside in ((SIZE, False), ((260, 60), True)):
        async with app.run_test(size=size) as pilot:
            await ready(app, "3", select=b)(pilot)
            panel = app.screen.query_one(VerificationPanel)
            report = _text(panel.query_one("#verification-report", Static).content,
                           width=panel.size.width)
            lines = report.splitlines()
            title = next(i for i, ln in enumerate(lines) if "speedup by concurrency" in ln)
            row = next(i for i, ln in enumerate(lines) if "0.97x (τ 3.10)" in ln)
            # beside the table in a wide pane (the same lines), under it in a narrow one
            assert (abs(title - row) < 12) if beside else title > row, report
            assert drawn(report) >= 10
            ticks = next(ln for ln in lines[title:] if " 32" in ln and "1" in ln)
            assert ticks.split()[-2:] == ["1", "32"] or ticks.split()[-1] == "32", ticks
        app = HarnessApp(store, sid, clock=lambda: NOW)
    store.close()
