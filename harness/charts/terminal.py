"""Charts drawn with characters, by plotext: for ``harness plot``, and (through
textual-plotext, whose widget holds a plotext figure) for the TUI.

:func:`draw` puts a :class:`.model.Chart` on a plotext figure (the ``plotext`` module
itself, or a textual-plotext ``Plot``: the same methods); :func:`render` draws one to
text on a figure of its own. plotext is imported only here, and only when a chart is
drawn: no other command pays for it.
"""

from __future__ import annotations

import math
from typing import Any

from harness.charts.model import Chart, Line

MIN_LEGEND_WIDTH = 44  # narrower than this, a legend would cover the lines
# Without colour, each line (and each bar of a group) draws with a glyph of its own, so the
# legend still tells them apart; with colour, lines are braille dots, told apart by colour.
GLYPHS = ("•", "+", "x", "o", "*", "#", "=", "%", "@", "~")
BAR_GLYPHS = ("█", "▒", "░", "#", "=", "+", "x", "o", "*", "%")


def draw(fig: Any, chart: Chart, *, title: bool = True, legend: bool = True,
         colour: bool = True) -> None:
    """Draw ``chart`` on plotext figure ``fig`` (already cleared and sized)."""
    several = len(chart.lines) > 1
    plain = several and not colour
    if chart.categorical:
        cats = list(chart.categories)
        rows = [_by_category(line, cats) for line in chart.lines]
        if several:
            fig.multiple_bar(cats, rows, labels=[line.name for line in chart.lines]
                             if legend else None,
                             marker=[BAR_GLYPHS[i % len(BAR_GLYPHS)] for i in range(len(rows))]
                             if plain else None)
        else:
            fig.bar(cats, rows[0])
    else:
        for i, line in enumerate(chart.lines):
            xs, ys = _drawn(line.xs, line.ys)
            if not xs:
                continue
            label = line.name if legend and several else None
            fig.plot(xs, ys, marker=GLYPHS[i % len(GLYPHS)] if plain else "braille",
                     label=label)
            if line.has_spread:  # min to max of the trials, as an error bar
                spans = [(float(x), lo, hi) for x, lo, hi in zip(line.xs, line.lo, line.hi,
                                                                 strict=True)
                         if lo is not None and hi is not None]
                if spans:
                    fig.error([s[0] for s in spans], [(s[1] + s[2]) / 2 for s in spans],
                              yerr=[(s[2] - s[1]) / 2 for s in spans], color="gray")
        xs = sorted({float(x) for line in chart.lines for x in line.xs})
        if chart.log_x:
            fig.xscale("log")
            fig.xticks(xs, [_tick(t) for t in xs])
        elif len(xs) > 1:
            ticks = nice_ticks(xs[0], xs[-1], whole=all(x == int(x) for x in xs))
            fig.xticks(ticks, [_tick(t) for t in ticks])
    if title:
        fig.title(chart.title)
    fig.xlabel(chart.axis)


def _drawn(xs: tuple[Any, ...], ys: tuple[float | None, ...]) -> tuple[list[float],
                                                                      list[float]]:
    """The points that have a value (a NaN loss is a gap, not a zero)."""
    pairs = [(float(x), y) for x, y in zip(xs, ys, strict=False) if y is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _by_category(line: Line, cats: list[str]) -> list[float]:
    values = {str(x): y for x, y in zip(line.xs, line.ys, strict=True)}
    return [values.get(c) or 0.0 for c in cats]


def nice_ticks(lo: float, hi: float, most: int = 6, *, whole: bool = False) -> list[float]:
    """Round numbers (1, 2 or 5 times a power of ten apart) from ``lo`` to ``hi``; only
    whole numbers when ``whole`` (positions, epochs)."""
    span = hi - lo
    if span <= 0:
        return [lo]
    step = 10 ** math.floor(math.log10(span / most))
    for factor in (1, 2, 5, 10):
        if span / (step * factor) <= most:
            step *= factor
            break
    if whole:
        step = max(step, 1)
    first = math.ceil(lo / step) * step
    count = int((hi - first) / step + 1e-9) + 1
    return [round(first + i * step, 10) for i in range(count)]


def _tick(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


def render(chart: Chart, width: int, height: int, *, colour: bool = True,
           title: bool = True) -> str:
    """``chart`` as ``height`` lines of ``width`` cells: ANSI colours when ``colour``."""
    import plotext as plt

    plt.clear_figure()
    plt.theme("pro" if colour else "clear")
    plt.plotsize(width, height)
    draw(plt, chart, title=title, legend=width >= MIN_LEGEND_WIDTH, colour=colour)
    text = plt.build()
    return text if colour else plt.uncolorize(text)


__all__ = ["draw", "render"]
