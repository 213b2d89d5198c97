"""Charts as inline SVG, by pygal, for the HTML report: self-contained (its style inside
the SVG, fonts by family name only, and no script: pygal's own, which only serves its
optional tooltips, is taken out), so the page can be opened anywhere, offline."""

from __future__ import annotations

import re
from typing import Any

from harness.charts.model import Chart

WIDTH, HEIGHT = 640, 300
MAX_X_LABELS = 12
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def _style() -> Any:
    from pygal.style import Style

    return Style(background="white", plot_background="white", foreground="#333",
                 foreground_strong="#111", foreground_subtle="#888",
                 font_family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
                 colors=("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                         "#e377c2", "#7f7f7f"),
                 title_font_size=15, label_font_size=11, major_label_font_size=11,
                 legend_font_size=11)


def svg(chart: Chart, width: int = WIDTH, height: int = HEIGHT) -> str:
    """``chart`` as one ``<svg>`` element (no XML declaration), ready to inline."""
    import pygal

    common: dict[str, Any] = dict(
        js=[], disable_xml_declaration=True, width=width, height=height, style=_style(),
        title=chart.title, x_title=chart.axis,
        show_legend=len(chart.lines) > 1 or any(line.has_spread for line in chart.lines),
        legend_at_bottom=True, legend_at_bottom_columns=3, truncate_legend=40,
        print_values=False, explicit_size=True, dots_size=2.5, min_scale=4, max_scale=6)
    if chart.categorical:
        out: Any = pygal.Bar(**common)
        out.x_labels = list(chart.categories)
        for line in chart.lines:
            values = {str(x): y for x, y in zip(line.xs, line.ys, strict=True)}
            out.add(line.name, [values.get(c) for c in chart.categories])
    elif chart.log_x:
        # a few values over a wide range (concurrency 1..64): evenly spaced, as on a log axis
        xs = sorted({float(x) for line in chart.lines for x in line.xs})
        out = pygal.Line(**common)
        out.x_labels = [f"{x:g}" for x in xs]
        for line in chart.lines:
            values = {float(x): y for x, y in zip(line.xs, line.ys, strict=True)}
            out.add(line.name, [values.get(x) for x in xs])
            if line.has_spread:
                lows = {float(x): lo for x, lo in zip(line.xs, line.lo, strict=True)}
                highs = {float(x): hi for x, hi in zip(line.xs, line.hi, strict=True)}
                for name, bound in (("min", lows), ("max", highs)):
                    out.add(f"{line.name} {name}", [bound.get(x) for x in xs],
                            stroke_style={"dasharray": "3, 4"}, show_dots=False)
    else:
        many = max(len(line.xs) for line in chart.lines) > 40
        out = pygal.XY(**common, show_dots=not many)
        xs = sorted({float(x) for line in chart.lines for x in line.xs})
        if len(xs) <= MAX_X_LABELS and all(x == int(x) for x in xs):
            out.x_labels = [int(x) for x in xs]  # positions, epochs: whole numbers only
        for line in chart.lines:
            out.add(line.name, [(float(x), y) for x, y in zip(line.xs, line.ys, strict=True)
                                if y is not None])
    text = out.render(is_unicode=True)
    return _COMMENT.sub("", _SCRIPT.sub("", text))


__all__ = ["svg"]
