"""Measure the served speedup: the drafter's server against the same target without it.

These are served numbers: the engine's own decoding (CUDA graphs, batching, its kernels),
not the reference loop of ``eagle3.verify``, whose speedup is an upper bound no engine
reaches. For each concurrency in ``concurrency`` (default ``[1, 4, 16, 64]``) the fixed
prompt set is sent
to the baseline server, then to the speculative one, ``concurrency`` requests in flight at
a time, as streaming chat (or completions) requests. Per server and level it measures
output tokens/s, time to first token (TTFT), time per output token (TPOT) and latency,
with p50/p90/p99. Around every level it scrapes ``/metrics``; the spec-decode counter
deltas (:mod:`pipeline.vllm.metrics`) give the acceptance rate, mean acceptance length and
per-position acceptance. The speedup at each level is spec tokens/s over baseline tokens/s,
measured in the same run, minutes apart, so the ratio is fair even on a noisy host.

Metrics for a stage ``gate``: ``speedup_c<N>`` (e.g. ``gate: {min_served_speedup: {at: 1,
min: 1.3}}``), ``speedup_min``, ``throughput_c<N>``, ``baseline_throughput_c<N>``,
``tpot_p50_ms_c<N>``, ``baseline_tpot_p50_ms_c<N>``, ``ttft_p50_ms_c<N>``,
``acceptance_rate``, ``acceptance_length`` (served τ over all levels),
``acceptance_per_position`` (a list), per level ``acceptance_length_c<N>``,
``acceptance_rate_c<N>``, ``acceptance_per_position_c<N>``, ``num_drafts``,
``num_draft_tokens``, ``num_accepted_tokens``, ``requests_failed``; with a baseline,
``outputs_equal_c<N>`` and ``outputs_equal`` (the share of requests whose answer equals the
baseline's, token ids where the server returns them, else text) and ``outputs_compared``.
``served_table`` has the table's rows, ``levels`` everything per level, and ``out`` (default
``bench.json`` beside the result) every request's timings and answer. The table is printed
at the end, one line per concurrency.

Checks: ``requests_ok`` (no failed request), ``spec_decode_metrics`` (the speculative
server exports the counters and drafted), ``spec_counters_consistent`` (no restart between
scrapes, counters that add up), ``baseline_not_speculating``, and at temperature 0 with a
baseline ``outputs_equal_plain``: at the lowest concurrency every answer equals plain
greedy decoding's (the higher levels are reported; there a batch's kernels may round a
near-tie the other way). A SIGTERM or Ctrl-C stops
sending, keeps what was measured (the result says how far it got) and fails the stage.

Prompt files are JSONL: ``{"id", "messages": [...]}`` (chat) or ``{"id", "prompt": "..."}``
(completion). ``exclude`` (generate's or clean's ``samples.jsonl``) and ``samples`` pick the
held-out prompts the way ``eagle3.verify`` does (:mod:`pipeline.eagle3.heldout`): a prompt
whose id or user text is a training sample's is skipped, repeats too, and the first
``samples`` are kept, so served and offline τ are measured on the same prompts. For the completions endpoint, chat prompts go through the verifier's chat
template (``tokenizer``: the verifier directory; transformers is imported only then), with
``enable_thinking`` set from ``reasoning``; for the chat endpoint the server applies it,
and ``reasoning`` travels as ``chat_template_kwargs``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, add_bool_arg, make_parser, run_action
from pipeline.eagle3.bench_report import (
    OutputComparison,
    compare_outputs,
    fmt,
    level_rows,
    render_table,
)
from pipeline.eagle3.heldout import excluded, user_text
from pipeline.eagle3.load_levels import Interrupted, Level, run_level
from pipeline.errors import ActionError
from pipeline.series import emit
from pipeline.served_gates import BENCH_LEVELS
from pipeline.vllm.metrics import SpecDelta, SpecSnapshot, spec_delta, spec_snapshot
from pipeline.vllm.openai_client import get

ACTION = "eagle3.benchmark"


@dataclass
class Prompt:
    id: str
    messages: list[dict[str, str]] | None = None
    text: str | None = None


def load_prompts(path: Path, *, exclude: Path | None = None,
                 samples: int | None = None) -> list[Prompt]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ActionError(f"cannot read the prompt set: {exc.strerror or exc}",
                          where=str(path)) from None
    try:
        skip_ids, skip_texts = excluded(exclude)
    except OSError as exc:
        raise ActionError(f"cannot read the training samples: {exc.strerror or exc}",
                          where=str(exclude)) from None
    seen: set[str] = set()
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ActionError(f"not JSON: {exc}", where=where) from None
        if not isinstance(obj, dict):
            raise ActionError("a prompt must be a JSON object", where=where)
        pid = str(obj.get("id") or f"line{number}")
        if isinstance(obj.get("messages"), list):
            msgs = obj["messages"]
            if not msgs or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                   and isinstance(m.get("content"), str) for m in msgs):
                raise ActionError("`messages` must be a list of {role, content} objects",
                                  where=where)
            prompt = Prompt(pid, messages=msgs)
            text = user_text(msgs)
        elif isinstance(obj.get("prompt"), str):
            prompt = Prompt(pid, text=obj["prompt"])
            text = " ".join(obj["prompt"].split())
        else:
            raise ActionError("expected `messages` (chat) or `prompt` (completion)",
                              where=where)
        if exclude is not None or samples is not None:
            # the held-out selection of pipeline.eagle3.heldout.load_heldout
            if pid in skip_ids or text in skip_texts or text in seen:
                continue
            seen.add(text)
        prompts.append(prompt)
        if samples is not None and len(prompts) >= samples:
            break
    if not prompts:
        raise ActionError("the prompt set is empty" if exclude is None else
                          "no held-out prompt left: every prompt is a training sample's",
                          where=str(path))
    return prompts


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Benchmark the speculative server against the baseline: "
                            "tokens/s, TTFT, TPOT, served τ and acceptance per position, "
                            "answers against plain greedy, speedup per concurrency. These "
                            "are served numbers (the engine's), not eagle3.verify's "
                            "reference-loop bound.")
    p.add_argument("--url", required=True, help="the speculative server, e.g. "
                                                "http://127.0.0.1:8001")
    p.add_argument("--baseline-url", help="the same target without speculation")
    p.add_argument("--model", help="model name to request (default: what /v1/models lists)")
    p.add_argument("--baseline-model")
    p.add_argument("--prompts", type=Path, required=True, help="JSONL prompt set")
    p.add_argument("--exclude", type=Path, help="JSONL of training samples (generate's "
                                                "samples.jsonl): their prompts are skipped, "
                                                "as eagle3.verify skips them")
    p.add_argument("--samples", type=int, help="use the first N (held-out) prompts")
    p.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    p.add_argument("--tokenizer", help="verifier directory, for its chat template "
                                       "(completions endpoint with chat prompts)")
    add_bool_arg(p, "reasoning", None, "thinking on/off (enable_thinking); unset: the "
                                       "template's default")
    p.add_argument("--concurrency", type=json.loads, default=list(BENCH_LEVELS),
                   help="JSON list of concurrencies")
    p.add_argument("--requests", type=int, default=None,
                   help="requests per level (default: the prompt count, at least 2x "
                        "the concurrency)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    add_bool_arg(p, "ignore-eos", False, "generate max_tokens every time (vLLM extension)")
    add_bool_arg(p, "return-token-ids", True, "ask for the generated token ids (vLLM "
                                              "extension), to compare answers exactly")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured requests per server")
    p.add_argument("--request-timeout", type=float, default=600.0)
    add_bool_arg(p, "require-spec-metrics", True, "fail when the speculative server "
                                                  "exports no spec-decode counters")
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument("--out", type=Path, help="per-request timings (default: bench.json "
                                            "beside the result)")
    return p


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def _served_model(url: str, api_key: str | None, role: str) -> str:
    answer = get(f"{url}/v1/models", timeout=10.0, api_key=api_key)
    if not answer.ok:
        raise ActionError(f"no {role} server answers at {url}: {answer.describe()}",
                          hint="is its serve stage completed and its server still up? "
                               "Servers stop when a pipeline run ends; run the pipeline "
                               "again and the serve stages restart them")
    try:
        return str(answer.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ActionError(f"{url}/v1/models lists no model") from None


def _metric_names(url: str, model: str, api_key: str | None) -> list[str]:
    """Every name the server may label ``model``'s counters with. vLLM labels them with
    the first ``--served-model-name`` only, while ``/v1/models`` lists each alias as its
    own card with the same ``root`` (a LoRA adapter's card names its base as ``parent``)."""
    names = [model]
    answer = get(f"{url}/v1/models", timeout=10.0, api_key=api_key)
    try:
        cards = [c for c in answer.json()["data"] if isinstance(c, dict)] if answer.ok else []
    except (ValueError, KeyError, TypeError):
        cards = []
    mine = next((c for c in cards if c.get("id") == model), None)
    if mine is not None:
        base = next((c for c in cards if c.get("id") == mine.get("parent")), mine)
        names += [str(c.get("id")) for c in cards
                  if c.get("root") is not None and c.get("root") == base.get("root")
                  and not c.get("parent")]
    return list(dict.fromkeys(names))


def _scrape(url: str, model: list[str], api_key: str | None) -> SpecSnapshot:
    answer = get(f"{url}/metrics", timeout=10.0, api_key=api_key)
    if not answer.ok:
        raise ActionError(f"cannot read {url}/metrics: {answer.describe()}",
                          hint="vLLM serves /metrics unless started with metrics off")
    return spec_snapshot(answer.body.decode("utf-8", "replace"), model=model)


def _bodies(prompts: list[Prompt], args: argparse.Namespace,
            model: str) -> list[tuple[str, dict[str, Any]]]:
    common: dict[str, Any] = {"model": model, "max_tokens": args.max_tokens,
                              "temperature": args.temperature}
    if args.ignore_eos:
        common["ignore_eos"] = True
    if args.return_token_ids:
        common["return_token_ids"] = True
    out = []
    template = None
    for p in prompts:
        if args.endpoint == "chat":
            body = {**common, "messages": p.messages or [{"role": "user",
                                                          "content": p.text or ""}]}
            if args.reasoning is not None:
                body["chat_template_kwargs"] = {"enable_thinking": bool(args.reasoning)}
            out.append(("/v1/chat/completions", body))
            continue
        if p.messages is not None:
            if template is None:
                template = _chat_template(args.tokenizer)
            text = template(p.messages, args.reasoning)
        else:
            text = p.text or ""
        out.append(("/v1/completions", {**common, "prompt": text}))
    return out


def _chat_template(tokenizer: str | None) -> Any:
    if not tokenizer:
        raise ActionError("chat prompts on the completions endpoint need `tokenizer` (the "
                          "verifier directory) for its chat template",
                          hint="or use `endpoint: chat`, where the server applies it")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ActionError("transformers is needed to apply the chat template here",
                          hint="install it, or use `endpoint: chat`") from None
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer)
    except (OSError, ValueError) as exc:
        raise ActionError(f"cannot load the tokenizer: {exc}", where=tokenizer) from None
    if not getattr(tok, "chat_template", None):
        raise ActionError("the tokenizer has no chat template", where=tokenizer)

    def apply(messages: list[dict[str, str]], reasoning: bool | None) -> str:
        kwargs = {} if reasoning is None else {"enable_thinking": bool(reasoning)}
        return str(tok.apply_chat_template(messages, tokenize=False,
                                           add_generation_prompt=True, **kwargs))
    return apply


def _report(level: Level) -> str:
    s = level.summary()
    line = (f"[c={level.concurrency}] {level.role}: {s['completed']}/{level.requests} ok"
            f"{' (interrupted)' if level.interrupted else ''}, "
            f"{fmt(s['output_throughput'])} tok/s, TTFT p50 {fmt(s['ttft_ms']['p50'], '.1f')}"
            f" ms, TPOT p50 {fmt(s['tpot_ms']['p50'], '.2f')} ms")
    if level.spec is not None and level.spec.present:
        line += (f", acceptance length {fmt(level.spec.acceptance_length, '.2f')}, rate "
                 f"{fmt(level.spec.acceptance_rate, '.2f')}")
    if s["errors"]:
        line += f"; first error: {s['errors'][0]}"
    return line


def run(args: argparse.Namespace) -> StageResult:
    result = StageResult(action=ACTION)
    concurrency = args.concurrency
    if not isinstance(concurrency, list) or not concurrency or not all(
            isinstance(c, int) and c > 0 for c in concurrency):
        raise ActionError(f"concurrency must be a list of positive integers, got "
                          f"{concurrency!r}")
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.samples is not None and args.samples < 1:
        raise ActionError(f"samples must be at least 1, got {args.samples}")
    prompts = load_prompts(args.prompts, exclude=args.exclude, samples=args.samples)
    print(f"{len(prompts)} prompts from {args.prompts}"
          + (f" (held out from {args.exclude})" if args.exclude else ""), flush=True)
    servers: list[tuple[str, str, str]] = []
    if args.baseline_url:
        base = _base(args.baseline_url)
        servers.append(("baseline", base, args.baseline_model or _served_model(
            base, api_key, "baseline")))
    spec_url = _base(args.url)
    servers.append(("spec", spec_url, args.model or _served_model(spec_url, api_key,
                                                                   "speculative")))
    bodies = {role: _bodies(prompts, args, model) for role, _url, model in servers}
    labels = {role: _metric_names(url, model, api_key) for role, url, model in servers}
    out_path = args.out or ((args.result.parent if args.result else Path.cwd()) / "bench.json")
    levels: list[Level] = []
    interrupted: Level | None = None
    plan = {c: args.requests or max(len(prompts), 2 * c) for c in concurrency}
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        for role, url, _model in servers:
            if args.warmup > 0:
                warm = Level(role, url, 1, args.warmup)
                run_level(warm, bodies[role], timeout=args.request_timeout, api_key=api_key)
                print(f"warm-up {role}: {len(warm.ok)}/{args.warmup} ok", flush=True)
        for c in concurrency:
            n = plan[c]
            for role, url, _model in servers:
                level = Level(role, url, c, n)
                before = _scrape(url, labels[role], api_key)
                try:
                    run_level(level, bodies[role], timeout=args.request_timeout,
                              api_key=api_key)
                finally:
                    try:
                        level.spec = spec_delta(before, _scrape(url, labels[role], api_key))
                    except (ActionError, KeyboardInterrupt):
                        level.spec = None
                    levels.append(level)
                print(_report(level), flush=True)
            level_series(c, [lv for lv in levels if lv.concurrency == c])
    except Interrupted as exc:
        interrupted = exc.level
        print(_report(exc.level), flush=True)
    except KeyboardInterrupt:
        interrupted = levels[-1] if levels else Level("setup", args.url, 0, 0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    planned = len(servers) * sum(plan.values())
    _results(result, levels, servers, args, out_path, interrupted, planned,
             [p.id for p in prompts])
    return result


def level_series(c: int, levels: list[Level]) -> None:
    """One concurrency's figures as series for the charts (:mod:`pipeline.series`): the
    speedup, and per server (plain, speculative) its tokens/s and TPOT p50."""
    by = {lv.role: lv for lv in levels if not lv.interrupted}
    spec, base = by.get("spec"), by.get("baseline")
    if spec and base and spec.throughput and base.throughput:
        emit("speedup", c, spec.throughput / base.throughput, axis="concurrency")
    for role, lv in by.items():
        s, server = lv.summary(), {"server": "plain" if role == "baseline" else "speculative"}
        emit("tokens_per_s", c, s["output_throughput"], axis="concurrency", labels=server)
        emit("tpot_ms", c, s["tpot_ms"]["p50"], axis="concurrency", labels=server)


def _results(result: StageResult, levels: list[Level], servers: list[tuple[str, str, str]],
             args: argparse.Namespace, out_path: Path, interrupted: Level | None,
             planned: int, prompt_ids: list[str]) -> None:
    m: dict[str, Any] = {}
    speedups: dict[int, float] = {}
    comparisons: dict[int, OutputComparison] = {}
    by = {(lv.role, lv.concurrency): lv for lv in levels}
    has_baseline = any(role == "baseline" for role, _u, _m in servers)
    for c in dict.fromkeys(lv.concurrency for lv in levels):
        spec, base = by.get(("spec", c)), by.get(("baseline", c))
        for lv, prefix in ((spec, ""), (base, "baseline_")):
            if lv is None or lv.interrupted:
                continue
            s = lv.summary()
            m[f"{prefix}throughput_c{c}"] = s["output_throughput"]
            m[f"{prefix}tpot_p50_ms_c{c}"] = s["tpot_ms"]["p50"]
            m[f"{prefix}ttft_p50_ms_c{c}"] = s["ttft_ms"]["p50"]
        if spec is not None and spec.spec is not None and spec.spec.present:
            d = spec.spec
            m[f"acceptance_length_c{c}"] = _round(d.acceptance_length)
            m[f"acceptance_rate_c{c}"] = _round(d.acceptance_rate)
            m[f"acceptance_per_position_c{c}"] = [round(x, 4) for x in
                                                  d.acceptance_per_position]
            m[f"num_drafts_c{c}"] = d.drafts
        if spec is not None and base is not None:
            comparisons[c] = compare_outputs(spec, base, prompt_ids)
            if comparisons[c].compared:
                m[f"outputs_equal_c{c}"] = comparisons[c].share
        if spec and base and not spec.interrupted and not base.interrupted \
                and spec.throughput and base.throughput:
            speedups[c] = spec.throughput / base.throughput
            m[f"speedup_c{c}"] = round(speedups[c], 4)
    if speedups:
        m["speedup_min"] = round(min(speedups.values()), 4)
        m["speedup"] = m[f"speedup_c{min(speedups)}"]
    spec_levels = [lv for lv in levels if lv.role == "spec" and lv.spec is not None]
    total = SpecDelta()
    for lv in spec_levels:
        total = total + lv.spec  # type: ignore[operator]
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
    compared = sum(cmp_.compared for cmp_ in comparisons.values())
    if compared:
        m["outputs_equal"] = round(sum(cmp_.equal for cmp_ in comparisons.values())
                                   / compared, 4)
        m["outputs_compared"] = compared
        m["outputs"] = [cmp_.to_json() for cmp_ in comparisons.values()]
    rows = level_rows(levels, comparisons)
    m["served_table"] = rows
    m["levels"] = [lv.summary() for lv in levels]
    result.metrics = m
    if rows:
        print("served (vLLM; plain = the same verifier without speculation; TPOT p50; τ "
              "and per position from /metrics over that level):", flush=True)
        print(render_table(rows), flush=True)
    _write_details(out_path, levels, args)
    result.artifacts.append(str(out_path))

    first_error = next((r.error for lv in levels for r in lv.failed), None)
    result.check("requests_ok", failed == 0, value=failed, expected=0,
                 message=f"first error: {first_error}" if first_error else
                 f"{m['requests_completed']} requests completed")
    spec_url = next(u for role, u, _m in servers if role == "spec")
    if args.require_spec_metrics and spec_levels:
        if not total.present:
            result.check("spec_decode_metrics", False, value="absent",
                         expected="vllm:spec_decode_* counters",
                         message=f"{spec_url}/metrics has no spec-decode counters: the "
                                 "server is not speculating (started without "
                                 "--speculative-config?) or its vLLM does not export them, "
                                 "so acceptance cannot be measured")
        else:
            result.check("spec_decode_metrics", total.drafts > 0, value=total.drafts,
                         expected="> 0 drafts",
                         message="drafts counted" if total.drafts > 0 else
                         "the counters exist but nothing was drafted during the benchmark")
    if total.present:
        problems = total.problems()
        if total.resets:
            problems.insert(0, "the server restarted between scrapes (counters went down: "
                               + ", ".join(total.resets[:3]) + ")")
        result.check("spec_counters_consistent", not problems, value=len(problems),
                     expected=0, message="; ".join(problems) or "counters add up")
    if has_baseline and args.temperature == 0 and comparisons:
        low = min(comparisons)
        first = comparisons[low]
        others = ", ".join(f"c={c}: {x.equal}/{x.compared}" for c, x in comparisons.items()
                           if c != low)
        diff = first.first_difference
        where = (f"; first difference: request {diff['request']} (prompt {diff['prompt']}) "
                 f"at {diff['unit']} {diff['at']}, spec {diff['spec']!r} against plain "
                 f"{diff['baseline']!r}") if diff else ""
        result.check("outputs_equal_plain", first.compared > 0 and first.equal ==
                     first.compared, value=f"{first.equal}/{first.compared}",
                     expected="all equal at temperature 0",
                     message=f"c={low}: {first.equal}/{first.compared} answers equal plain "
                             f"greedy ({'token ids' if first.by_tokens else 'text'})"
                             + (f"; {others}" if others else "") + where)
    if has_baseline:
        base_drafts = sum(lv.spec.drafts for lv in levels
                          if lv.role == "baseline" and lv.spec is not None)
        result.check("baseline_not_speculating", base_drafts == 0, value=base_drafts,
                     expected=0, message="the baseline must serve the target alone" if
                     base_drafts else "no drafts on the baseline")
    parts = [f"c={c}: {s:.2f}x" for c, s in speedups.items()]
    if total.present and total.acceptance_length is not None:
        per = "/".join(f"{x:.2f}" for x in total.acceptance_per_position)
        parts.append(f"acceptance length {total.acceptance_length:.2f}, rate "
                     f"{fmt(total.acceptance_rate, '.2f')}, per position {per}")
    result.summary = "; ".join(parts) or "no complete level"
    if interrupted is not None:
        done = sum(len(lv.records) for lv in levels)
        result.error = (f"interrupted during c={interrupted.concurrency} "
                        f"({interrupted.role}) after {done} of {planned} requests; "
                        f"figures so far: {result.summary}")
        print(f"error: {result.error}", file=sys.stderr, flush=True)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


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


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
