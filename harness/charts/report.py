"""``harness report --html``: one self-contained page about a session, to attach to a
message: the board, each stage's charts (inline SVG, :mod:`.svg`), the verification and
served tables, and the session's last changes.

Everything the page shows is in the file: its style in a ``<style>`` element, its charts
as ``<svg>`` elements, no script and nothing fetched (a page opened from a mail
attachment, offline, looks the same). Store text is escaped, never trusted as markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from html import escape
from typing import Any

from harness import __version__
from harness.charts.model import charts
from harness.charts.svg import svg
from harness.charts.targets import recorded
from harness.gates import Gate, gate_items, outcome
from harness.render import BADGE, GLYPH, SECTION, describe, safe_line, safe_text
from harness.served_view import comparisons, verification_figures
from state.fold import VerificationState, board_key, unmet_dependencies
from state.store import Store

_CLASS = {"passed": "pass", "failed": "fail", "undecided": "undecided"}
_MARK = {"passed": "✓", "failed": "✗", "undecided": "?"}

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #1d2330; margin: 2rem auto; max-width: 1400px; padding: 0 1.5rem; }
h1 { font-size: 1.5rem; margin: 0 0 .2rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .6rem; border-bottom: 1px solid #d8dce4;
     padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
.sub { color: #5b6372; }
table { border-collapse: collapse; margin: .3rem 0 1rem; }
th, td { text-align: left; padding: .25rem .6rem; border-bottom: 1px solid #eceef2;
         vertical-align: top; }
th { color: #5b6372; font-weight: 600; }
tr.section th { color: #1d2330; font-size: 1rem; padding-top: 1rem; }
td.figures { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.when { white-space: nowrap; }
.status-in_progress { color: #b26b00; } .status-blocked { color: #c0262d; }
.status-completed { color: #217a3c; } .status-cancelled { color: #8a909c; }
.pass { color: #217a3c; font-weight: 600; } .fail { color: #c0262d; font-weight: 600; }
.undecided { color: #9a6700; font-weight: 600; }
.why { color: #c0262d; font-size: .92em; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
.chart { border: 1px solid #eceef2; border-radius: 6px; padding: .3rem; }
.bar { display: inline-block; height: .7rem; background: #4c9a5b; vertical-align: middle; }
.track { display: inline-block; width: 8rem; background: #eceef2; margin-right: .4rem; }
code { font-size: .92em; }
"""


def _e(text: Any) -> str:
    return escape(safe_text(str(text)))


def _num(value: Any, fmt: str = ".3g") -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, (int, float)):
        return format(value, fmt)
    if isinstance(value, list):
        return " / ".join(_num(v, fmt) for v in value)
    return _e(value)


def build_report(store: Store, session_id: int, *, history: int = 40,
                 now: datetime | None = None) -> str:
    """The page, as text."""
    sess = store.session_by_id(session_id)
    name = sess.name if sess else str(session_id)
    state = store.state_at(session_id)
    todos = list(state.todos.values())
    verifs = sorted(state.verifications.values(), key=lambda v: v.id)
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    active = [t for t in todos if t.status != "cancelled"]
    done = sum(t.status == "completed" for t in active)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        # Nothing may be fetched: the page is whole as it is (a mail attachment, offline).
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(name)}: todo-harness report</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(name)}</h1>",
        f'<p class="sub">pipeline {_e(sess.pipeline if sess and sess.pipeline else "-")} · '
        f"{done}/{len(active)} done · {len(state.runs)} runs · report of {stamp} "
        f"(todo-harness {__version__})</p>",
        _board(todos, state.todos, {v.todo_id: v for v in verifs}),
        _charts(store, session_id),
        _verifications(verifs, state.todos),
        _served(verifs),
        _history(store, session_id, history),
        "</body></html>"]
    return "\n".join(p for p in parts if p)


def _board(todos: Sequence[Any], by_num: dict[int, Any],
           newest: dict[int | None, VerificationState]) -> str:
    """One table, a heading row per section (as `harness list` orders them)."""
    if not todos:
        return '<h2 id="board">Board</h2>\n<p class="sub">No todos.</p>'
    rows = ['<h2 id="board">Board</h2>', '<table class="board">']
    current = None
    for t in sorted(todos, key=board_key):
        if t.status != current:
            current = t.status
            count = sum(x.status == current for x in todos)
            rows.append(f'<tr class="section"><th colspan="6">'
                        f"{_e(SECTION.get(current, current))} ({count})</th></tr>")
        waits = unmet_dependencies(t, by_num)
        extra = ""
        if waits and t.status not in ("completed", "cancelled"):
            extra += f'<div class="sub">waiting on {", ".join(f"t{d}" for d in waits)}</div>'
        if t.status == "blocked" and t.blocked_reason:
            extra += f'<div class="why">blocked: {_e(t.blocked_reason)}</div>'
        v = newest.get(t.num)
        figures = _e(verification_figures(v.metrics)) if v is not None else ""
        rows.append(f'<tr class="status-{_e(t.status)}"><td>{GLYPH.get(t.status, "?")}</td>'
                    f"<td>{t.id}</td><td>{BADGE.get(t.priority, '?')}</td>"
                    f"<td>{_e(t.content)}{extra}</td><td>{_e(t.stage or '')}</td>"
                    f'<td class="figures">{figures}</td></tr>')
    rows.append("</table>")
    return "\n".join(rows)


def _charts(store: Store, session_id: int) -> str:
    targets = recorded(store, session_id)
    out = ['<h2 id="charts">Charts</h2>']
    if not targets:
        out.append('<p class="sub">No stage recorded series yet (they are recorded while '
                   "a stage runs).</p>")
        return "\n".join(out)
    for t in targets:
        series = t.series(store)
        title = t.todo.content if t.todo is not None else ""
        out.append(f'<h3 id="charts-r{t.run.id}">{_e(t.label)} <span class="sub">'
                   f"({_e(t.run.state)}) {_e(safe_line(title, 90))}</span></h3>")
        out.append('<div class="charts">')
        for chart in charts([series]):
            out.append(f'<div class="chart" data-metric="{_e(chart.metric)}">'
                       f"{svg(chart)}</div>")
        out.append("</div>")
    return "\n".join(out)


def _verifications(verifs: Iterable[VerificationState], todos: dict[int, Any]) -> str:
    rows = list(verifs)
    out = ['<h2 id="verifications">Verifications</h2>']
    if not rows:
        out.append('<p class="sub">No verifications recorded.</p>')
        return "\n".join(out)
    out.append("<table><tr><th>id</th><th>todo</th><th>kind</th><th>verdict</th>"
               "<th>figures</th><th>acceptance per position</th><th>gate</th><th>when</th>"
               "</tr>")
    for v in rows:
        todo = todos.get(v.todo_id) if v.todo_id is not None else None
        word = outcome(v.passed, v.checks, v.gate, v.metrics)
        verdict = f'<span class="{_CLASS[word]}">{word.upper()}</span>'
        per = v.metrics.get("acceptance_per_position")
        bars = ""
        if isinstance(per, list):
            bars = "<br>".join(
                f'<span class="track"><span class="bar" style="width:{_pct(x)}%"></span>'
                f"</span>pos {i} {_num(x, '.1%') if _isnum(x) else '-'}"
                for i, x in enumerate(per, 1))
        gate = "<br>".join(
            f'<span class="{_CLASS[item.outcome]}">'
            f'{_MARK[item.outcome]}</span> {_e(item.line)}'
            for item in gate_items(Gate.from_json(v.gate), v.metrics)) if v.gate else ""
        out.append(f"<tr><td>v{v.id}</td><td>{todo.id if todo else '-'}</td>"
                   f"<td>{_e(v.kind)}</td><td>{verdict}<div class=\"sub\">"
                   f"{_e(safe_line(v.verdict, 200))}</div></td>"
                   f"<td>{_e(verification_figures(v.metrics))}</td><td>{bars}</td>"
                   f"<td>{gate}</td><td>{_e(v.created_at[:16].replace('T', ' '))}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _isnum(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _pct(x: Any) -> float:
    return round(min(max(float(x), 0.0), 1.0) * 100, 1) if _isnum(x) else 0.0


# (key in a served_table row, heading, format)
SERVED_HEAD = [("concurrency", "c", "d"), ("plain_tok_s", "plain tok/s", ".0f"),
               ("spec_tok_s", "spec tok/s", ".0f"), ("speedup", "speedup", ".2f"),
               ("plain_tpot_ms", "plain TPOT ms", ".2f"),
               ("spec_tpot_ms", "spec TPOT ms", ".2f"), ("tau", "served τ", ".2f"),
               ("per_position", "per position", ".3f")]


def _served(verifs: Sequence[VerificationState]) -> str:
    benches = [v for v in verifs if isinstance(v.metrics.get("served_table"), list)]
    pairs = comparisons(verifs, verifs)
    if not benches and not pairs:
        return ""
    out = ['<h2 id="served">Served</h2>']
    for v in benches:
        out.append(f"<h3>v{v.id} {_e(v.kind)}</h3><table><tr>"
                   + "".join(f"<th>{_e(h)}</th>" for _k, h, _f in SERVED_HEAD) + "</tr>")
        for row in v.metrics["served_table"]:
            if not isinstance(row, dict):
                continue
            cells = []
            for key, _h, fmt in SERVED_HEAD:
                value = row.get(key)
                text = _num(value, "d" if isinstance(value, int) else fmt)
                unit = "x" if key == "speedup" and _isnum(value) else ""
                cells.append(f'<td class="num">{text}{unit}</td>')
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</table>")
    for c in pairs:
        out.append(f"<h3>{_e(c.title)}</h3><table><tr><th></th>"
                   "<th>offline (reference loop)</th><th>served (vLLM)</th></tr>")
        for what, offline, served in c.rows():
            out.append(f"<tr><td>{_e(what)}</td><td>{_e(offline)}</td>"
                       f"<td>{_e(served)}</td></tr>")
        out.append("</table>")
    return "\n".join(out)


def _history(store: Store, session_id: int, count: int) -> str:
    if count <= 0:
        return ""
    last = store.last_n(session_id)
    events = store.events(session_id, after_n=max(0, last - count))
    out = [f'<h2 id="history">History <span class="sub">(the last {len(events)} of {last} '
           "changes)</span></h2>", "<table><tr><th>#</th><th>when</th><th>who</th>"
           "<th>what</th></tr>"]
    for ev in reversed(events):
        out.append(f"<tr><td>{ev.n}</td><td class=\"when\">{_e(ev.ts[:19].replace('T', ' '))}</td>"
                   f"<td>{_e(ev.actor)}</td><td>{_e(describe(ev))}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


__all__ = ["build_report"]
