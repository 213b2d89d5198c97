"""What a chart holds, built from stored points: one per metric, a line per run and label
set, the last point at an x counting, names on a categorical axis in the order they came,
and which axes are read as logarithmic."""

from __future__ import annotations

from harness.charts.model import Chart, Line, RunSeries, charts, main_metric, summaries
from harness.charts.terminal import nice_ticks, render
from state.series import SeriesPoint


def pts(run: int, *rows: tuple) -> tuple[SeriesPoint, ...]:
    return tuple(SeriesPoint(run_id=run, start=i, metric=m, axis=a, x=x, y=y,
                             labels=labels or {}) for i, (m, a, x, y, labels) in enumerate(rows))


def test_one_chart_per_metric_a_line_per_run_and_labels() -> None:
    a = RunSeries(1, "r1", pts(1, ("loss", "step", 200, 3.0, None), ("loss", "step", 100, 4.0,
                                                                         None),
                               ("loss", "step", 200, 2.5, None),  # recorded again: the last
                               ("acc", "epoch", 1, 0.5, {"position": 2}),
                               ("acc", "epoch", 1, 0.6, {"position": 1})))
    b = RunSeries(2, "r2", pts(2, ("loss", "step", 100, 3.5, None)))
    got = charts([a, b])
    assert [c.metric for c in got] == ["loss", "acc"]  # the order first recorded
    loss = got[0]
    assert [(ln.name, ln.xs, ln.ys) for ln in loss.lines] == [
        ("r1", (100, 200), (4.0, 2.5)), ("r2", (100,), (3.5,))]
    assert [ln.name for ln in got[1].lines] == ["r1 position 2", "r1 position 1"]
    assert [ln.name for ln in charts([a], ["acc"])[0].lines] == ["position 2", "position 1"]
    assert main_metric(a, "train") == "loss" and main_metric(a, "mine") == "loss"
    assert main_metric(RunSeries(3, "r3"), "train") is None
    [s_loss, *_] = summaries(a.points)
    assert (s_loss.points, s_loss.first_x, s_loss.last_x, s_loss.last, s_loss.low) == \
        (2, 100, 200, 2.5, 2.5)


def test_names_on_the_x_axis_are_bars_in_the_order_they_came() -> None:
    run = RunSeries(1, "r1", pts(1, ("tau", "checkpoint", "untrained", 1.1, None),
                                 ("tau", "checkpoint", "epoch-001", 2.4, None),
                                 ("tau", "checkpoint", "drafter", 3.0, None)))
    [tau] = charts([run])
    assert tau.categorical and tau.categories == ("untrained", "epoch-001", "drafter")
    text = render(tau, 60, 12, colour=False)
    assert "█" in text and "untrained" in text and "tau by checkpoint" in text


def test_concurrency_is_read_on_a_log_axis_and_steps_are_not() -> None:
    def chart(xs: tuple[float, ...]) -> Chart:
        return Chart("m", "a", (Line("m", 1, xs, tuple(1.0 for _ in xs)),))
    assert chart((1, 4, 16, 64)).log_x
    assert chart((1, 2, 4, 8, 16)).log_x
    assert not chart((200, 400, 600, 800, 1000, 1250, 1450, 1650)).log_x  # steps
    assert not chart((1, 4)).log_x  # too narrow a range to need it
    assert nice_ticks(200, 1650) == [500, 1000, 1500]
    assert nice_ticks(1, 3, whole=True) == [1, 2, 3]  # positions: no 1.5
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
