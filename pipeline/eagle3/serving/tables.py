"""The tables a served benchmark prints: speed and latency per candidate, and a sweep.

- :func:`candidate_rows` gives, per concurrency, one candidate against the baseline over
  the trials: output tokens/s of both (median and min-max), the speedup (the estimate, its
  interval and half-width, the trials, settled or not, and why the level stopped), the
  latencies of both
  (TPOT p50, ITL p50/p99, TTFT p50/p99: each the median over trials of that trial's
  percentile, with min-max), served τ and per-position acceptance from ``/metrics`` over
  that level's trials, and the answers compared with the baseline's;
- :func:`render_speed` and :func:`render_latency` print those rows;
- :func:`render_sweep` prints every candidate's speedup per level side by side, for a sweep
  over k.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.eagle3.serving.report import fmt
from pipeline.eagle3.serving.trials import BASELINE, LevelVerdict, ServerLevel, Spread

__all__ = ["LATENCIES", "candidate_rows", "render_latency", "render_speed", "render_sweep"]

LATENCIES = ("tpot_p50_ms", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms", "ttft_p99_ms")


def _spread_cell(values: Sequence[float | None] | None, spec: str) -> str:
    """``708 (700-712)``: the median, and the smallest and largest trial when they differ."""
    if not values or values[0] is None:
        return "-"
    med, low, high = values
    if low is None or high is None or low == high:
        return format(med, spec)
    return f"{format(med, spec)} ({format(low, spec)}-{format(high, spec)})"


def candidate_rows(candidate: str, found: Mapping[int, LevelVerdict],
                   servers: Mapping[tuple[str, int], ServerLevel]) -> list[dict[str, Any]]:
    """One row per concurrency (in the order measured) for ``candidate``."""
    rows = []
    for c, verdict in found.items():
        spec, base = servers.get((candidate, c)), servers.get((BASELINE, c))
        row: dict[str, Any] = {"candidate": candidate, "concurrency": c,
                               "trials": len(verdict.speedups)}
        for side, server in (("plain", base), ("spec", spec)):
            tok = server.figure("tok_s") if server else Spread.of([])
            row[f"{side}_tok_s"] = tok.to_json(3)
            row[side] = {key: (server.figure(key) if server else Spread.of([])).to_json(3)
                         for key in LATENCIES}
        ci = verdict.interval
        row["speedup"] = None if ci.estimate is None else round(ci.estimate, 4)
        row["interval"] = None if ci.low is None or ci.high is None else \
            [round(ci.low, 4), round(ci.high, 4)]
        row["half_width"] = None if ci.half_width is None else round(ci.half_width, 4)
        row["speedup_median"] = verdict.speedup.to_json()[0]
        row["settled"] = verdict.settled if len(verdict.speedups) > 1 else None
        row["stopped"] = verdict.stopped
        delta = spec.spec if spec is not None else None
        present = delta is not None and delta.present
        row["tau"] = round(delta.acceptance_length, 4) if present and \
            delta.acceptance_length is not None else None  # type: ignore[union-attr]
        row["per_position"] = [round(x, 4) for x in delta.acceptance_per_position] \
            if present else []  # type: ignore[union-attr]
        outputs = verdict.outputs
        row["outputs_equal"] = outputs.equal if outputs else None
        row["outputs_compared"] = outputs.compared if outputs else None
        rows.append(row)
    return rows


def _table(head: list[str], body: list[list[str]], left: Sequence[int] = ()) -> str:
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return " | ".join(c.ljust(w) if i in left else c.rjust(w)
                          for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(head), "-+-".join("-" * w for w in widths),
                      *(line(b) for b in body)])


def render_speed(rows: list[dict[str, Any]]) -> str:
    """Tokens/s (median (min-max) over trials) and the speedup per concurrency: its
    estimate, interval and half-width, the figures a gate holds."""
    head = ["c", "trials", "plain tok/s", "spec tok/s", "speedup", "interval", "+-",
            "verdict", "served τ", "per position", "outputs = plain"]
    body = []
    for r in rows:
        per = "/".join(f"{x:.3f}" for x in r["per_position"]) or "-"
        same = "-" if r["outputs_compared"] is None else \
            f"{r['outputs_equal']}/{r['outputs_compared']}"
        verdict = {True: "settled", False: "WIDE", None: "1 trial"}[r["settled"]]
        if r["settled"] is False and r.get("stopped"):
            verdict += f" ({r['stopped']})"
        ci = r["interval"]
        body.append([str(r["concurrency"]), str(r["trials"]),
                     _spread_cell(r["plain_tok_s"], ".0f"), _spread_cell(r["spec_tok_s"],
                                                                        ".0f"),
                     "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
                     "-" if ci is None else f"{ci[0]:.2f}-{ci[1]:.2f}x",
                     "-" if r["half_width"] is None else f"{r['half_width']:.1%}", verdict,
                     fmt(r["tau"], ".3f"), per, same])
    return _table(head, body, left=(7, 9))


def render_latency(rows: list[dict[str, Any]]) -> str:
    """Per concurrency and server, milliseconds: each trial's percentile over its requests
    (ITL over every gap between chunks), median (min-max) over trials."""
    head = ["c", "server", "TPOT p50", "ITL p50", "ITL p99", "TTFT p50", "TTFT p99"]
    body = []
    for r in rows:
        for side in ("plain", "spec"):
            body.append([str(r["concurrency"]), side if side == "plain" else r["candidate"],
                         *(_spread_cell(r[side][key], ".2f") for key in LATENCIES)])
    return _table(head, body, left=(1,))


def render_sweep(matrix: Mapping[int, Mapping[str, float | None]],
                 best: Mapping[int, str]) -> str:
    """Every candidate's speedup (its estimate) per concurrency, and the best."""
    names = list(dict.fromkeys(n for row in matrix.values() for n in row))
    head = ["c", *names, "best"]
    body = [[str(c), *("-" if row.get(n) is None else f"{row[n]:.2f}x" for n in names),
             best.get(c, "-")] for c, row in matrix.items()]
    return _table(head, body)
