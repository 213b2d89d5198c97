"""What a served benchmark concludes: its metrics, checks, tables, and (for a sweep over k)
the schedule it writes.

:func:`conclude` takes every level measured (one per server, concurrency and trial) and
fills the stage result: the figures of the first candidate as metrics a gate can hold (the
speedup's estimate as ``speedup_c<N>``, its interval, its trials, why the level stopped), the
other candidates under ``candidates``, the checks, one speed table and one latency table
per candidate, the sweep's matrix and schedule when asked for one, and the per-request
details file. Standard library only (the intervals import SciPy when computed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult
from pipeline.eagle3.serving.load_levels import Level
from pipeline.eagle3.serving.near_ties import Judge, judge_places
from pipeline.eagle3.serving.report import fmt
from pipeline.eagle3.serving.tables import (
    candidate_rows,
    render_latency,
    render_speed,
    render_sweep,
)
from pipeline.eagle3.serving.trials import (
    BASELINE,
    LevelVerdict,
    ServerLevel,
    server_levels,
    verdicts,
)
from pipeline.errors import ActionError
from pipeline.series import emit
from pipeline.vllm import schedule as sched
from pipeline.vllm.metrics import SpecDelta

__all__ = ["Server", "conclude", "read_sweep"]


@dataclass(frozen=True)
class Server:
    role: str     # "baseline", or the candidate's name
    url: str
    model: str


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _level_metrics(m: dict[str, Any], c: int, verdict: LevelVerdict,
                   servers: dict[tuple[str, int], ServerLevel], name: str) -> None:
    """The gateable figures of ``name`` against the baseline at concurrency ``c``."""
    for role, prefix in ((name, ""), (BASELINE, "baseline_")):
        server = servers.get((role, c))
        if server is None:
            continue
        for key, metric in (("tok_s", "throughput"), ("tpot_p50_ms", "tpot_p50_ms"),
                            ("ttft_p50_ms", "ttft_p50_ms"), ("ttft_p99_ms", "ttft_p99_ms"),
                            ("itl_p50_ms", "itl_p50_ms"), ("itl_p99_ms", "itl_p99_ms")):
            value = server.figure(key).median
            if value is not None:
                m[f"{prefix}{metric}_c{c}"] = round(value, 3)
    spec = servers.get((name, c))
    delta = spec.spec if spec is not None else None
    if delta is not None and delta.present:
        m[f"acceptance_length_c{c}"] = _round(delta.acceptance_length)
        m[f"acceptance_rate_c{c}"] = _round(delta.acceptance_rate)
        m[f"acceptance_per_position_c{c}"] = [round(x, 4) for x in
                                              delta.acceptance_per_position]
        m[f"num_drafts_c{c}"] = delta.drafts
    if verdict.outputs is not None and verdict.outputs.compared:
        m[f"outputs_equal_c{c}"] = verdict.outputs.share
    _interval_metrics(m, c, verdict)


def _interval_metrics(m: dict[str, Any], c: int, verdict: LevelVerdict) -> None:
    ci = verdict.interval
    if ci.estimate is None:
        return
    m[f"speedup_c{c}"] = round(ci.estimate, 4)
    m[f"speedup_trials_c{c}"] = ci.n
    m[f"speedup_median_c{c}"] = _round(verdict.speedup.median)
    m[f"speedups_c{c}"] = [round(x, 4) for x in verdict.speedups]
    if ci.low is not None and ci.high is not None:
        m[f"speedup_low_c{c}"] = round(ci.low, 4)
        m[f"speedup_high_c{c}"] = round(ci.high, 4)
        m[f"speedup_ci_c{c}"] = _round(ci.half_width)
    m[f"speedup_settled_c{c}"] = verdict.settled
    if verdict.stopped is not None:
        m[f"stopped_c{c}"] = verdict.stopped


def _total(levels: list[Level], role: str) -> SpecDelta:
    total = SpecDelta()
    for lv in levels:
        if lv.role == role and lv.spec is not None:
            total = total + lv.spec
    return total


def _measured_k(delta: SpecDelta) -> int | None:
    """The k a server drafts: draft tokens per draft (a fixed-k server: exactly k)."""
    if not delta.present or not delta.drafts:
        return None
    k = delta.draft_tokens / delta.drafts
    return round(k) if abs(k - round(k)) < 1e-6 else None


def _candidate_summary(levels: list[Level], found: dict[int, LevelVerdict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c, v in found.items():
        _interval_metrics(out, c, v)
    return out


def conclude(result: StageResult, levels: list[Level], servers: list[Server],
             args: argparse.Namespace, *, out_path: Path, interrupted: Level | None,
             prompt_ids: list[str], stops: dict[int, str] | None = None,
             planned: int = 0, judge: Judge | None = None) -> None:
    """Fill ``result`` from the levels measured; ``stops`` says why each level took no
    more trials, ``planned`` the least number of requests the whole run was to send (for
    the message of an interrupted one); ``judge`` asks the plain server about answers that
    differ from its own (:mod:`pipeline.eagle3.serving.near_ties`)."""
    m: dict[str, Any] = {}
    has_baseline = any(s.role == BASELINE for s in servers)
    candidates = [s for s in servers if s.role != BASELINE]
    primary = candidates[0].role
    by_server = server_levels(levels)
    found = {s.role: verdicts(levels, s.role, prompt_ids, ci_width=args.ci_width,
                              confidence=args.confidence) for s in candidates}
    for per_level in found.values():
        for c, v in per_level.items():
            v.stopped = (stops or {}).get(c, "interrupted" if interrupted else None)
    for c, verdict in found[primary].items():
        _level_metrics(m, c, verdict, by_server, primary)
    speedups = {c: v.estimate for c, v in found[primary].items() if v.estimate is not None}
    if speedups:
        m["speedup_min"] = round(min(speedups.values()), 4)
        m["speedup"] = m[f"speedup_c{min(speedups)}"]
    m["trials"] = args.trials
    m["max_trials"] = args.max_trials
    m["min_seconds"] = args.min_seconds
    m["confidence"] = args.confidence
    m["ci_width"] = args.ci_width
    m["level_budget"] = args.level_budget
    m["extra_budget"] = getattr(args, "extra_budget", 0.0)
    m["speedup_figure"] = ("one trial, no interval" if args.trials == 1 else
                           f"geometric mean of paired trials (ABBA), {args.confidence:.0%} "
                           "t interval")
    m["unsettled_levels"] = [c for c, v in found[primary].items()
                             if args.trials > 1 and not v.settled]
    done = [lv for lv in levels if not lv.interrupted and lv.trial > 0]
    answered = [r for lv in done for r in lv.ok]
    if answered:
        m["mean_output_tokens"] = round(sum(r.output_tokens for r in answered)
                                        / len(answered), 2)
    if args.output_len:
        m["output_len"] = args.output_len
        m["lengths"] = f"{args.output_len} tokens each (output_len, ignore_eos)"
    elif args.ignore_eos:
        m["lengths"] = f"{args.max_tokens} tokens each (ignore_eos)"
    else:
        m["lengths"] = (f"natural: each answer ends where the model ends it, at most "
                        f"{args.max_tokens} tokens")
    total = _total(levels, primary)
    if total.present:
        m.update({"acceptance_rate": _round(total.acceptance_rate),
                  "acceptance_length": _round(total.acceptance_length),
                  "acceptance_per_position": [round(x, 4) for x in
                                              total.acceptance_per_position],
                  "num_drafts": total.drafts, "num_draft_tokens": total.draft_tokens,
                  "num_accepted_tokens": total.accepted})
    failed = sum(len(lv.failed) for lv in levels)
    m["requests_failed"] = failed
    m["requests_completed"] = sum(len(lv.ok) for lv in levels)
    comparisons = [v.outputs for v in found[primary].values() if v.outputs is not None]
    compared = sum(x.compared for x in comparisons)
    if compared:
        m["outputs_equal"] = round(sum(x.equal for x in comparisons) / compared, 4)
        m["outputs_compared"] = compared
        m["outputs"] = [x.to_json() for x in comparisons]
    rows = [row for s in candidates for row in candidate_rows(s.role, found[s.role],
                                                              by_server)]
    m["served_table"] = rows
    m["levels"] = [lv.summary() for lv in levels]
    ks = {s.role: _measured_k(_total(levels, s.role)) for s in candidates}
    if len(candidates) > 1:
        m["candidates"] = {s.role: {"url": s.url, "k": ks[s.role],
                                    **_candidate_summary(levels, found[s.role])}
                           for s in candidates[1:]}
    result.metrics = m
    _print_tables(rows, candidates, m)
    if has_baseline:
        _host_drift(m, by_server)
    if len(candidates) > 1 and has_baseline:
        _print_sweep(found, ks)
    if args.schedule_out is not None:
        _write_schedule(result, found, ks, args)
    if args.sweep is not None:
        _against_sweep(result, found[primary], args.sweep)
    _write_details(out_path, levels, args)
    result.artifacts.append(str(out_path))
    level_series(found, by_server)
    _checks(result, levels, candidates, found, args, has_baseline, judge)
    _summary(result, found[primary], total, interrupted, levels,
             planned if args.min_seconds <= 0 else None)


DRIFT_NOTE = 0.10  # a plain server whose own speed moves more than this is worth a line


def _host_drift(m: dict[str, Any], servers: dict[tuple[str, int], ServerLevel]) -> None:
    """How far plain's own tokens/s moved over a level's runs: the same server, the same
    requests, so what moves is the host. A wide interval is then the host's, not the
    drafter's; the ABBA order cancels a steady drift, not a jump."""
    for (role, c), server in servers.items():
        speed = server.figure("tok_s")
        if role != BASELINE or speed.n < 2 or not speed.low or speed.high is None:
            continue
        spread = speed.high / speed.low - 1
        m[f"baseline_spread_c{c}"] = round(spread, 4)
        if spread > DRIFT_NOTE:
            speeds = [lv.throughput or 0.0 for lv in server.trials]
            print(f"note: c={c}: plain's own tokens/s moved {spread:.0%} over its "
                  f"{len(speeds)} runs ({', '.join(f'{x:.0f}' for x in speeds)}): the host's "
                  "speed moved; the ABBA order cancels a steady drift, not a jump",
                  flush=True)


def level_series(found: dict[str, dict[int, LevelVerdict]],
                 by_server: dict[tuple[str, int], ServerLevel]) -> None:
    """The levels as series for the charts (:mod:`pipeline.series`): every candidate's
    speedup (its estimate, with its interval as the spread), and every server's tokens/s
    and TPOT p50 (the median over trials, with the smallest and largest trial; plain is
    the baseline)."""
    for role, per_level in found.items():
        for c, verdict in sorted(per_level.items()):
            ci = verdict.interval
            if ci.estimate is not None:
                emit("speedup", c, ci.estimate, axis="concurrency",
                     labels={"server": _series_name(role)},
                     spread=[ci.low, ci.high] if ci.low is not None else None)
    for (role, c), level in sorted(by_server.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        label = {"server": _series_name(role)}
        for metric, key in (("tokens_per_s", "tok_s"), ("tpot_ms", "tpot_p50_ms")):
            fig = level.figure(key)
            if fig.median is not None:
                emit(metric, c, fig.median, axis="concurrency", labels=label,
                     spread=[fig.low, fig.high] if fig.n > 1 else None)


def _series_name(role: str) -> str:
    return {BASELINE: "plain", "spec": "speculative"}.get(role, role)


def _print_tables(rows: list[dict[str, Any]], candidates: list[Server],
                  m: dict[str, Any]) -> None:
    for s in candidates:
        mine = [r for r in rows if r["candidate"] == s.role]
        if not mine:
            continue
        name = "spec" if s.role == "spec" else f"spec = {s.role}"
        print(f"served (vLLM; plain = the same verifier without speculation, {name}; "
              f"trials of >= {m['min_seconds']:g} s per server, ABBA order; speedup = the "
              f"geometric mean of the trials' speedups, with its {m['confidence']:.0%} "
              f"interval, which gates hold; a level stops once it is within "
              f"+-{m['ci_width']:.0%} (settled) or its {m['level_budget']:g} s budget"
              + (f" and its share of the extra {m['extra_budget']:g} s" if m['extra_budget']
                 else "")
              + " is spent (WIDE); tok/s and latencies: median (min-max) over trials; τ and "
              f"per position from /metrics over the level; lengths: {m['lengths']}):",
              flush=True)
        print(render_speed(mine), flush=True)
        print("latency, ms (each trial's percentile over its requests; ITL over the gaps "
              "between stream chunks):", flush=True)
        print(render_latency(mine), flush=True)


def _print_sweep(found: dict[str, dict[int, LevelVerdict]], ks: dict[str, int | None]
                 ) -> None:
    matrix: dict[int, dict[str, float | None]] = {}
    for name, per_level in found.items():
        label = name if ks.get(name) is None else f"{name} (k={ks[name]})"
        for c, v in per_level.items():
            matrix.setdefault(c, {})[label] = v.estimate
    best = {c: max(((v, n) for n, v in row.items() if v is not None), default=(None, "-"))[1]
            for c, row in matrix.items()}
    print("speedup over plain per level, every candidate (the trials' geometric mean):",
          flush=True)
    print(render_sweep(matrix, best), flush=True)


def _write_schedule(result: StageResult, found: dict[str, dict[int, LevelVerdict]],
                    ks: dict[str, int | None], args: argparse.Namespace) -> None:
    names = args.schedule_from or list(found)
    usable = {n: k for n, k in ks.items() if n in names and k is not None}
    skipped = [n for n in names if n not in usable]
    if skipped:
        print(f"schedule: {', '.join(skipped)} drafted nothing or no fixed k (draft tokens "
              "per draft not whole): left out", flush=True)
    table: dict[int, dict[str, float | None]] = {}
    for name in usable:
        for c, v in found[name].items():
            table.setdefault(c, {})[name] = v.estimate
    graphs = getattr(args, "schedule_graphs", sched.FULL)
    try:
        schedule, choices = sched.from_sweep(table, usable, margin=args.schedule_margin,
                                             graphs=graphs)
    except sched.ScheduleError as exc:
        result.error = f"no schedule written: {exc}"
        return
    path = args.schedule_out
    if not path.is_absolute():
        path = Path.cwd() / path
    fixed = sched.best_fixed(table, usable)
    sched.write(path, schedule, choices, {"trials": args.trials,
                                          "min_seconds": args.min_seconds,
                                          "candidates": usable, "graphs": graphs,
                                          "best_fixed_k": fixed})
    result.metrics["schedule"] = [list(e) for e in schedule]
    result.metrics["schedule_path"] = str(path)
    result.metrics["schedule_graphs"] = graphs
    result.metrics["best_fixed_k"] = fixed
    gave_up = [ch for ch in choices if ch.best_k is not None]
    if gave_up:
        result.metrics["schedule_gave_up"] = [ch.to_json() for ch in gave_up]
    result.artifacts.append(str(path))
    print(f"schedule ({sched.KEY}) written to {path}: {json.dumps(schedule)}; per level: "
          + ", ".join(f"c={ch.concurrency} k={ch.k}" + (
              f" ({ch.candidate} {ch.speedup:.2f}x)" if ch.speedup is not None else "")
              for ch in choices), flush=True)
    for ch in gave_up:
        print(f"schedule: c={ch.concurrency} gave up its fastest k={ch.best_k} "
              f"({ch.by_k.get(ch.best_k, 0):.2f}x) for k={ch.k} ("
              + (f"{ch.speedup:.2f}x" if ch.speedup is not None else "not measured")
              + "): with full CUDA graphs vLLM 0.26 starts only a schedule of one k "
              "(a per-level schedule needs schedule_graphs: piecewise and a serve stage run "
              "with piecewise graphs)", flush=True)


def read_sweep(path: Path) -> dict[int, dict[str, Any]]:
    """A sweep's schedule file, per concurrency (read before anything is measured)."""
    try:
        doc = json.loads(path.read_text())
        return {int(x["concurrency"]): x for x in doc["levels"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ActionError(f"cannot read the sweep's file: {exc}", where=str(path)) from None


def _against_sweep(result: StageResult, found: dict[int, LevelVerdict], path: Path) -> None:
    """The candidate (a schedule, say) against the best fixed k the sweep measured."""
    levels = read_sweep(path)
    rows = []
    for c, v in found.items():
        sweep = levels.get(c)
        best_k, best = (None, None)
        if sweep and sweep.get("by_k"):
            best_k, best = max(((int(k), s) for k, s in sweep["by_k"].items()),
                               key=lambda x: x[1])
        mine = v.estimate
        beats = None if mine is None or best is None else mine >= best
        rows.append({"concurrency": c, "speedup": _round(mine), "best_fixed_k": best_k,
                     "best_fixed_speedup": best, "beats_best_fixed_k": beats})
    result.metrics["against_sweep"] = rows
    print(f"against the sweep's best fixed k ({path}; its figures are its own trials):",
          flush=True)
    for r in rows:
        verdict = {True: "beats or equals it", False: "SLOWER than it", None: "-"}[
            r["beats_best_fixed_k"]]
        print(f"  c={r['concurrency']}: {fmt(r['speedup'], '.2f')}x against k="
              f"{r['best_fixed_k']} at {fmt(r['best_fixed_speedup'], '.2f')}x: {verdict}",
              flush=True)


def _checks(result: StageResult, levels: list[Level], candidates: list[Server],
            found: dict[str, dict[int, LevelVerdict]], args: argparse.Namespace,
            has_baseline: bool, judge: Judge | None = None) -> None:
    failed = result.metrics["requests_failed"]
    first_error = next((r.error for lv in levels for r in lv.failed), None)
    result.check("requests_ok", failed == 0, value=failed, expected=0,
                 message=f"first error: {first_error}" if first_error else
                 f"{result.metrics['requests_completed']} requests completed")
    measured = [s for s in candidates if any(lv.role == s.role for lv in levels)]
    if args.require_spec_metrics and measured:
        missing = [s for s in measured if not _total(levels, s.role).present]
        idle = [s for s in measured if s not in missing and not _total(levels, s.role).drafts]
        message = "drafts counted"
        if missing:
            message = (f"{missing[0].url}/metrics has no spec-decode counters: the server "
                       "is not speculating (started without --speculative-config?) or its "
                       "vLLM does not export them, so acceptance cannot be measured")
        elif idle:
            message = (f"{idle[0].role}: the counters exist but nothing was drafted during "
                       "the benchmark")
        result.check("spec_decode_metrics", not missing and not idle,
                     value="absent" if missing else sum(_total(levels, s.role).drafts
                                                        for s in measured),
                     expected="vllm:spec_decode_* counters, > 0 drafts", message=message)
    problems = []
    for s in candidates:
        total = _total(levels, s.role)
        if total.present:
            problems += [f"{s.role}: {p}" if len(candidates) > 1 else p
                         for p in total.problems()]
            if total.resets:
                problems.insert(0, f"{s.role}: the server restarted between scrapes "
                                   "(counters went down: " + ", ".join(total.resets[:3])
                                + ")")
    if any(_total(levels, s.role).present for s in candidates):
        result.check("spec_counters_consistent", not problems, value=len(problems),
                     expected=0, message="; ".join(problems) or "counters add up")
    if has_baseline and args.temperature == 0:
        _outputs_check(result, candidates, found, judge, getattr(args, "tie_margin", 0.0))
    if has_baseline:
        base_drafts = _total(levels, BASELINE).drafts
        result.check("baseline_not_speculating", base_drafts == 0, value=base_drafts,
                     expected=0, message="the baseline must serve the target alone" if
                     base_drafts else "no drafts on the baseline")


def _outputs_check(result: StageResult, candidates: list[Server],
                   found: dict[str, dict[int, LevelVerdict]], judge: Judge | None,
                   tie_margin: float) -> None:
    """At the lowest concurrency every candidate's answers equal plain greedy decoding's,
    or part from it only at near-ties of plain's own logits (within ``tie_margin`` nats,
    asked of the plain server by ``judge``); the other levels are reported (a batch's
    kernels may round a near-tie the other way)."""
    parts: list[str] = []
    values: list[tuple[bool, str]] = []  # (good, "equal/compared") per candidate
    judged: list[dict[str, Any]] = []
    for s in candidates:
        outputs = {c: v.outputs for c, v in found[s.role].items() if v.outputs is not None}
        if not outputs:
            continue
        low = min(outputs)
        first = outputs[low]
        others = ", ".join(f"c={c}: {x.equal}/{x.compared}" for c, x in outputs.items()
                           if c != low)
        diff = first.first_difference
        where = (f"; first difference: request {diff['request']} (prompt {diff['prompt']}) "
                 f"at {diff['unit']} {diff['at']}, spec {diff['spec']!r} against plain "
                 f"{diff['baseline']!r}") if diff else ""
        name = f"{s.role}: " if len(candidates) > 1 else ""
        good = first.compared > 0 and first.equal == first.compared
        ties = ""
        if not good and first.compared > 0 and judge is not None and tie_margin > 0:
            good, ties, rows = judge_places(first.divergences, first.unplaced,
                                            first.compared - first.equal, judge, tie_margin)
            judged += [{"candidate": s.role, "concurrency": low, **r} for r in rows]
        values.append((good, f"{first.equal}/{first.compared}"))
        parts.append(f"{name}c={low}: {first.equal}/{first.compared} answers equal plain "
                     f"greedy ({'token ids' if first.by_tokens else 'text'})" + ties
                     + (f"; {others}" if others else "") + where)
    if judged:
        result.metrics["outputs_ties"] = judged
    if values:
        ok = all(good for good, _v in values)
        value = next((v for good, v in values if not good), values[0][1])
        result.check("outputs_equal_plain", ok, value=value,
                     expected="all equal at temperature 0" + (
                         f", or parting only at near-ties (<= {tie_margin:g} nats)"
                         if judge is not None and tie_margin > 0 else ""),
                     message="; ".join(parts))


def _summary(result: StageResult, found: dict[int, LevelVerdict], total: SpecDelta,
             interrupted: Level | None, levels: list[Level], planned: int | None) -> None:
    parts = []
    for c, v in found.items():
        ci = v.interval
        if ci.estimate is None:
            continue
        part = f"c={c}: {ci.estimate:.2f}x"
        if ci.low is not None and ci.high is not None:
            part += (f" ({ci.low:.2f}-{ci.high:.2f}, {ci.n} trials"
                     + (")" if v.settled else ", WIDE)"))
        parts.append(part)
    if total.present and total.acceptance_length is not None:
        per = "/".join(f"{x:.2f}" for x in total.acceptance_per_position)
        parts.append(f"acceptance length {total.acceptance_length:.2f}, rate "
                     f"{fmt(total.acceptance_rate, '.2f')}, per position {per}")
    result.summary = "; ".join(parts) or "no complete level"
    if interrupted is not None:
        done = sum(len(lv.records) for lv in levels)
        of = f" of {planned}" if planned else ""
        result.error = (f"interrupted during c={interrupted.concurrency} "
                        f"({interrupted.role}, trial {interrupted.trial}) after {done}{of} "
                        f"requests; figures so far: {result.summary}")
        print(f"error: {result.error}", file=sys.stderr, flush=True)


def _write_details(path: Path, levels: list[Level], args: argparse.Namespace) -> None:
    doc = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in
                      vars(args).items()},
           "levels": [{**lv.summary(), "records": [
               {"index": i, **r.to_json()} for i, r in sorted(lv.records, key=lambda x: x[0])]}
               for lv in levels]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        os.replace(tmp, path)
    except OSError as exc:
        print(f"warning: cannot write {path}: {exc}", file=sys.stderr, flush=True)
