"""Verification results of the selected todo: checks, acceptance per position, τ, speedup,
and the gate's verdict; earlier attempts stay selectable.

A result is :class:`state.fold.VerificationState`: ``checks`` is a list of
``{name, passed, value, expected, message, from_table}`` (a check that passed only by a
table of known behaviour, not checked, shows as ``table`` in yellow, and the verdict says
how many there are), ``metrics`` holds e.g.
``acceptance_per_position`` (a list of rates), ``tau`` (mean acceptance length) and the
speed: a benchmark's served ``speedup_c<N>``, or the verify stage's reference-loop figures
(``reference_speedup_bound``, ``projected_speedup``: upper bounds, labelled as such), and
``gate`` the thresholds it was held to (``{min_acceptance_length: 2.0}``, read into a
typed :class:`harness.gates.Gate` once, where the row is shown). When a served
benchmark of the same checkpoint exists, the report puts offline and served side by side
(:mod:`harness.served_view`).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from harness.charts.model import Chart, served_chart
from harness.gates import FAIL, TABLE, UNDECIDED, Gate, check_status, gate_items, outcome
from harness.render import safe_line
from harness.served_view import Comparison, reference_bound
from state.fold import VerificationState
from tui.text import block, clock, line, number
from tui.views import verification_figures
from tui.widgets.chart import chart_text

BAR_WIDTH = 24
WIDE_REPORT = 84  # from this width (a wide terminal's pane) the chart stands beside the table
CHART_WIDTH, CHART_HEIGHT = 40, 12
_EIGHTHS = " ▏▎▍▌▋▊▉"
# Gate thresholds name the metric they hold; these metrics go by another name (a store
# written before the rename calls the reference loop's speedup measured_speedup). A
# served "speedup" has no alias: no offline figure stands in for it.
_METRIC_ALIASES = {"acceptance_length": "tau", "mean_acceptance_length": "tau",
                   "reference_speedup_bound": "measured_speedup",
                   "measured_speedup": "reference_speedup_bound"}
SHOWN_METRICS = ("acceptance_per_position", "tau", "projected_speedup",
                 "reference_speedup_bound", "measured_speedup")


def bar(fraction: float, width: int = BAR_WIDTH) -> Text:
    """A horizontal bar with eighth-cell precision."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    out = Text("█" * full, style="green" if fraction >= 0.5 else "yellow")
    if part:
        out.append(_EIGHTHS[part], style="green" if fraction >= 0.5 else "yellow")
    out.append("·" * (width - full - (1 if part else 0)), style="grey30")
    return out


_MARKS = {"passed": ("✓ ", "bold green"), "failed": ("✗ ", "bold red"),
          UNDECIDED: ("? ", "bold yellow")}


def gate_rows(gate: Gate, metrics: dict[str, Any]) -> list[tuple[Text, Text]]:
    """Each threshold with the measured value it was compared with, judged as the runner
    judges it (:func:`harness.gates.gate_items`)."""
    known = dict(metrics)
    for name, alias in _METRIC_ALIASES.items():
        if name not in known and alias in known:
            known[name] = known[alias]
    rows = []
    for item in gate_items(gate, known):
        value = Text()
        if item.says:  # a line in words (served τ against offline τ): both numbers
            value.append(*_MARKS[item.outcome])
            value.append(item.says)
        elif item.value is None:
            value.append(_shown(item.threshold))
        else:
            value.append("✓ " if item.passed else "✗ ",
                         style="bold green" if item.passed else "bold red")
            value.append(f"{item.where}{_shown(item.value)}, needs "
                         f"{'≥' if item.op == '>=' else '≤'} {_shown(item.limit)}")
        rows.append((line(item.key, 32), value))
    return rows


def _shown(x: Any) -> str:
    return ", ".join(number(v) for v in x) if isinstance(x, list) else number(x)


def attempt_label(v: VerificationState) -> Text:
    """One short line per attempt (an OptionList wraps long ones): when, which run, and
    the headline figures, or the verdict when there are none."""
    out = Text(no_wrap=True, overflow="ellipsis")
    word = outcome(v.passed, v.checks, v.gate, v.metrics)
    out.append(*_MARKS[word])
    out.append(f"v{v.id}", style="bold")
    out.append(f"  {clock(v.created_at)[5:16]}", style="dim")
    if v.run_id is not None:
        out.append(f"  r{v.run_id}", style="dim")
    figures = verification_figures(v.metrics)
    out.append("  ")
    if figures:
        out.append(figures)
    else:
        out.append_text(line(v.verdict, 32))
    return out


def report(v: VerificationState, width: int = 100,
           comparisons: tuple[Comparison, ...] = ()) -> Table:
    """One attempt, all of it, as a renderable (laid out for ``width`` cells), with the
    offline and served figures side by side when ``comparisons`` pair it with another."""
    compact = width < 60
    out = Table.grid(padding=(0, 1), expand=True)
    out.add_column()

    verdict = verdict_badge(v)
    verdict.append("  ")
    verdict.append_text(block(v.verdict))
    out.add_row(verdict)
    unchecked = table_line(v.checks)
    if unchecked is not None:
        out.add_row(unchecked)
    where = Text(style="dim")
    where.append(f"{v.kind}")
    if v.artifact:
        where.append("  ")
        where.append_text(line(v.artifact, 60))
    if v.sha256:
        where.append(f"  sha256 {v.sha256[:12]}")
    out.add_row(where)

    if v.gate:
        out.add_row(Text("Gate", style="bold"))
        out.add_row(gate_table(Gate.from_json(v.gate), v.metrics, compact=compact))

    if v.checks:
        out.add_row(Text("Checks", style="bold"))
        out.add_row(checks_table(v.checks, compact=compact))

    m = v.metrics
    per_pos = m.get("acceptance_per_position")
    if isinstance(per_pos, list) and per_pos:
        out.add_row(Text("Acceptance per position", style="bold"))
        bars = Table.grid(padding=(0, 1))
        for _ in range(3):
            bars.add_column(no_wrap=True)
        for i, rate in enumerate(per_pos, start=1):
            value = float(rate) if isinstance(rate, (int, float)) else 0.0
            bars.add_row(Text(f"pos {i}", style="dim"), bar(value), Text(f"{value:.1%}"))
        out.add_row(bars)

    figures = Text()
    if "tau" in m:
        figures.append("τ ", style="bold")
        figures.append(number(m["tau"]))
        figures.append(" (mean acceptance length)   ", style="dim")
    bound = reference_bound(m)
    if bound is not None or "projected_speedup" in m:
        figures.append("speed (reference loop, not served) ", style="bold")
        if bound is not None:
            figures.append(f"≤{number(bound)}x bound")
        if "projected_speedup" in m:
            figures.append(", " if bound is not None else "")
            figures.append(f"{number(m['projected_speedup'])}x projected")
    if figures:
        out.add_row(figures)
    charted = False
    for c in comparisons:
        if c.served.id == v.id or (c.offline is not None and c.offline.id == v.id):
            out.add_row(Text(c.title[0].upper() + c.title[1:], style="bold"))
            out.add_row(beside(comparison_table(c), served_chart(c.served.metrics), width))
            charted = charted or served_chart(c.served.metrics) is not None
    chart = None if charted else served_chart(m)
    if chart is not None:  # a benchmark compared with no verify row: its speedups alone
        out.add_row(beside(Text("Served speedup by concurrency", style="bold"), chart, width))
    others = {k: val for k, val in m.items() if k not in SHOWN_METRICS}
    if others:
        more = Table.grid(padding=(0, 1))
        more.add_column(style="dim", no_wrap=True)
        more.add_column()
        for k, val in others.items():
            more.add_row(line(k, 32), Text(number(val)))
        out.add_row(more)

    return out


def beside(table: Any, chart: Chart | None, width: int) -> Any:
    """``table`` with the served speedup chart beside it (under it in a narrow pane)."""
    if chart is None:
        return table
    out = Table.grid(padding=(0, 2))
    if width >= WIDE_REPORT:
        out.add_column(ratio=1)
        out.add_column(width=CHART_WIDTH)
        out.add_row(table, chart_text(chart, CHART_WIDTH, CHART_HEIGHT))
    else:
        out.add_column()
        out.add_row(table)
        out.add_row(chart_text(chart, min(max(width - 2, 30), CHART_WIDTH), CHART_HEIGHT))
    return out


def comparison_table(c: Comparison) -> Table:
    """Offline (the reference loop) and served (the engine) in their own columns."""
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="dim")
    table.add_column(Text(""), style="dim", no_wrap=True)
    table.add_column(Text("offline (ref. loop)"), overflow="fold")
    table.add_column(Text("served (vLLM)"), overflow="fold")
    for what, offline, served in c.rows():
        table.add_row(Text(what), Text(offline), Text(served))
    return table


_STATUS_CELL = {"PASS": ("pass", "bold green"), FAIL: ("FAIL", "bold red"),
                TABLE: ("table", "bold yellow")}


def status_cell(check: dict[str, Any]) -> Text:
    """``pass``, ``FAIL`` or ``table`` (passed only by a table of known behaviour)."""
    word, style = _STATUS_CELL[check_status(check)]
    return Text(word, style=style)


def table_line(checks: list[dict[str, Any]]) -> Text | None:
    """``5 checks from the table, not checked: vllm_source, ...`` (None: every check was
    made), in the warning colour: a PASSED verdict with these was not all checked."""
    names = [str(c.get("name", "?")) for c in checks if check_status(c) == TABLE]
    if not names:
        return None
    out = Text(f"{len(names)} check{'s' if len(names) != 1 else ''} from the table, not "
               "checked: ", style="yellow")
    out.append(safe_line(", ".join(names)), style="yellow")
    return out


_BADGES = {"passed": (" PASSED ", "bold white on dark_green"),
           "failed": (" FAILED ", "bold white on red3"),
           UNDECIDED: (" UNDECIDED ", "bold black on yellow")}


def verdict_badge(v: VerificationState) -> Text:
    """PASSED, FAILED, or UNDECIDED: a served speedup whose interval holds the threshold
    is neither, and says so."""
    return Text(*_BADGES[outcome(v.passed, v.checks, v.gate, v.metrics)])


def gate_table(gate: Gate, metrics: dict[str, Any], *, compact: bool = False
               ) -> Table:
    """Each threshold and what was measured; ``compact``: one wrapping line each, named by
    its metric (``✗ acceptance_length 1.87, needs ≥ 2``), for a narrow place."""
    table = Table.grid(padding=(0, 1))
    if compact:
        table.add_column()
        for label, value in gate_rows(gate, metrics):
            metric = label.plain.removeprefix("min_").removeprefix("max_")
            text = value.copy()
            mark = 2 if text.plain[:2] in ("✓ ", "✗ ") else 0
            text = text[:mark] + Text(f"{metric} ", style="bold") + text[mark:]
            table.add_row(text)
        return table
    table.add_column(style="dim", no_wrap=True)
    table.add_column()
    for label, value in gate_rows(gate, metrics):
        table.add_row(label, value)
    return table


def checks_table(checks: list[dict[str, Any]], *, compact: bool = False) -> Table:
    """A verdict column, the check's whole name (folded, never cut), what was measured
    and expected; the check's message under it. ``compact`` puts the figures under the
    name too, for a narrow place."""
    if compact:
        table = Table(box=None, padding=(0, 1), show_edge=False, header_style="dim",
                      expand=True)
        table.add_column(Text("verdict"), no_wrap=True)
        table.add_column(Text("check"), overflow="fold", ratio=1)
        for c in checks:
            table.add_row(status_cell(c),
                          Text(safe_line(str(c.get("name", "?"))), style="bold"))
            figures = Text(f"measured {number(c.get('value'))}", style="dim")
            if c.get("expected") is not None:
                figures.append(f", expected {number(c.get('expected'))}")
            table.add_row(Text(""), figures)
            if c.get("message"):
                table.add_row(Text(""), line(c["message"], 200, style="dim"))
        return table
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="dim",
                  expand=True)
    table.add_column(Text("verdict"), no_wrap=True)
    longest = max((len(str(c.get("name", "?"))) for c in checks), default=5)
    table.add_column(Text("check"), overflow="fold", min_width=min(longest, 18), ratio=2)
    table.add_column(Text("measured"), overflow="fold", ratio=1)
    table.add_column(Text("expected"), overflow="fold", ratio=1)
    for c in checks:
        table.add_row(status_cell(c),
                      Text(safe_line(str(c.get("name", "?")))),
                      Text(number(c.get("value"))), Text(number(c.get("expected"))))
        if c.get("message"):
            table.add_row(Text(""), line(c["message"], 200, style="dim"))
    return table


def latest_summary(results: tuple[VerificationState, ...]) -> Table | None:
    """The newest verification in a few lines, for the Detail tab: its verdict and
    figures, and the gate it was held to (3 shows the whole report)."""
    if not results:
        return None
    v = results[-1]
    out = Table.grid(padding=(0, 1), expand=True)
    out.add_column()
    head = verdict_badge(v)
    head.append(f"  v{v.id}", style="bold")
    figures = verification_figures(v.metrics)
    if figures:
        head.append(f"  {figures}")
    if len(results) > 1:
        head.append(f"  ({len(results)} attempts)", style="dim")
    out.add_row(head)
    unchecked = table_line(v.checks)
    if unchecked is not None:
        out.add_row(unchecked)
    if v.gate:
        out.add_row(gate_table(Gate.from_json(v.gate), v.metrics, compact=True))
    else:
        out.add_row(line(v.verdict, 200))
    out.add_row(Text("3 shows the checks and the whole report", style="dim italic"))
    return out


class VerificationPanel(Widget):
    """The attempts (newest first, selectable) and the selected attempt's report."""

    DEFAULT_CSS = """
    VerificationPanel { height: 1fr; }
    VerificationPanel OptionList {
        height: auto; max-height: 5; margin-bottom: 1;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    VerificationPanel #verification-empty { color: $text-muted; }
    VerificationPanel VerticalScroll { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._results: dict[str, VerificationState] = {}
        self._chosen: int | None = None
        self._comparisons: tuple[Comparison, ...] = ()

    def compose(self) -> ComposeResult:
        yield Static(Text("No verification results for this todo."), id="verification-empty")
        yield OptionList(id="attempts")
        with VerticalScroll():
            yield Static(id="verification-report")

    def show(self, results: tuple[VerificationState, ...],
             comparisons: tuple[Comparison, ...] = ()) -> None:
        self._comparisons = comparisons
        attempts = self.query_one("#attempts", OptionList)
        ids = [f"v{v.id}" for v in reversed(results)]
        if ids != list(self._results):
            # Keep an earlier attempt a person picked; otherwise follow the newest.
            newest_before = next(iter(self._results), None)
            kept = self._chosen in {v.id for v in results} and \
                f"v{self._chosen}" != newest_before
            highlighted = self._chosen if kept else None
            self._results = {f"v{v.id}": v for v in reversed(results)}
            attempts.clear_options()
            attempts.add_options([Option(attempt_label(v), id=f"v{v.id}")
                                  for v in self._results.values()])
            if results:
                chosen = highlighted if highlighted is not None else results[-1].id
                attempts.highlighted = ids.index(f"v{chosen}")
        self.query_one("#verification-empty").display = not results
        attempts.display = len(results) > 1
        self._render_chosen()

    @property
    def chosen(self) -> VerificationState | None:
        return self._results.get(f"v{self._chosen}") if self._chosen is not None else None

    @on(OptionList.OptionHighlighted, "#attempts")
    def _picked(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_id:
            self._chosen = int(event.option_id[1:])
            self._render_chosen()

    def choose(self, verification_id: int) -> None:
        ids = list(self._results)
        if f"v{verification_id}" in ids:
            self.query_one("#attempts", OptionList).highlighted = ids.index(f"v{verification_id}")
            self._chosen = verification_id
            self._render_chosen()

    def _render_chosen(self) -> None:
        target = self.query_one("#verification-report", Static)
        if not self._results:
            self._chosen = None
            target.update("")
            return
        if self.chosen is None:
            self._chosen = int(next(iter(self._results))[1:])
        chosen = self.chosen
        assert chosen is not None
        target.update(report(chosen, self.size.width or 100, self._comparisons))

    def on_resize(self) -> None:
        if self._results:
            self._render_chosen()
