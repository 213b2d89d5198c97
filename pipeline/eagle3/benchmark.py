"""Measure the served speedup: one or more speculative servers against the same target
without speculation, in paired trials until the speedup's interval is narrow enough.

These are served numbers: the engine's own decoding (CUDA graphs, batching, its kernels),
not the reference loop of ``eagle3.verify``, whose speedup is an upper bound no engine
reaches. ``url`` is one speculative server, or a mapping of several (``{k3: URL, k1: URL}``:
a sweep over k, or a schedule beside the fixed k it should beat); ``baseline_url`` is the
target alone, measured once per trial for all of them.

The levels in ``concurrency`` (default ``[1, 4, 16, 64]``) are measured one after another.
At a level, a *trial* gives the baseline and every candidate one run each
(:mod:`pipeline.eagle3.serving.load_levels`): at least ``requests`` (default 10 x the
concurrency) streaming requests, the prompt set cycled, ``concurrency`` in flight, for at
least ``min_seconds``, ending at a whole pass over the prompts. Trials alternate their order
(baseline first, then last: ABBA, so that the host's drift cancels in each pair of trials),
and a trial's speedup is the candidate's tokens/s over the baseline's in that trial
(:mod:`pipeline.eagle3.serving.trials`). After ``trials`` trials (default 4, an even
number) the level goes on, two trials at a time, until every candidate's 95% interval
(``confidence``) of the speedup is within ``ci_width`` (default ± 5%) of its estimate, or
``level_budget`` seconds (default 120) of the level have passed, or ``max_trials`` (default
16) were run; ``extra_budget`` seconds more then go to the levels that stopped wide,
nearest to settling first (:mod:`pipeline.eagle3.serving.sequential`). ``trials: 1``
measures each level once, with no interval (a quick sweep).
Per server and level it measures output tokens/s, TTFT, TPOT (``(latency - TTFT) / (tokens
- 1)``, as ``vllm bench serve``), ITL (the gaps between stream chunks) with p50/p99; around
every run it scrapes ``/metrics`` for the spec-decode counter deltas
(:mod:`pipeline.vllm.metrics`): acceptance rate, mean acceptance length, per-position
acceptance. ``output_len`` fixes every answer's length (``ignore_eos``) instead of natural
lengths (at most ``max_tokens``); the result says which.

Metrics (of the first candidate; the others under ``candidates``), for a stage ``gate``:
``speedup_c<N>`` (the geometric mean of the level's trials: what ``min_served_speedup:
{at: 1, min: 1.3}`` holds, with its interval), ``speedup_low_c<N>``,
``speedup_high_c<N>`` (the interval), ``speedup_ci_c<N>`` (its half-width, a share),
``speedup_trials_c<N>``, ``speedup_settled_c<N>``, ``stopped_c<N>`` (why the level took
no more trials: settled, budget, max_trials, one trial), ``speedup_median_c<N>``,
``speedup_min``, ``speedup``, ``throughput_c<N>``, ``tpot_p50_ms_c<N>``,
``ttft_p50_ms_c<N>``, ``ttft_p99_ms_c<N>``, ``itl_p50_ms_c<N>``, ``itl_p99_ms_c<N>`` (and
``baseline_...``; medians over trials), ``acceptance_rate``, ``acceptance_length``,
``acceptance_per_position``, per level ``acceptance_length_c<N>``,
``acceptance_rate_c<N>``, ``acceptance_per_position_c<N>``, ``num_drafts_c<N>``,
``outputs_equal_c<N>``, ``outputs_equal``, ``outputs_compared``, ``num_drafts``,
``num_draft_tokens``, ``num_accepted_tokens``, ``requests_failed``, ``trials``,
``confidence``, ``ci_width``, ``level_budget``, ``unsettled_levels``,
``mean_output_tokens``, ``roofline`` (plain decoding at c=1: the verifier's weight bytes
over its TPOT p50, the bandwidth that is, and its share of the GPU's datasheet peak, named
by its model: whether the run is bound by memory; :mod:`pipeline.eagle3.serving.roofline`).
``served_table`` has the printed rows, ``levels`` every trial per
server and level, and ``out`` (default ``bench.json`` beside the result) every request.

``schedule_out`` turns the run into a sweep: from each candidate's k (read from its
counters: draft tokens per draft) and speedup per level it writes the
``num_speculative_tokens_per_batch_size`` schedule (:mod:`pipeline.vllm.schedule`) that
``eagle3.serve`` takes, keeping to the schedules vLLM can start (k does not rise with the
batch size) and naming the levels that gave up their fastest k. ``sweep`` (that file) makes
a later run report whether its candidate beats the best fixed k of the sweep at each level.

Checks: ``requests_ok``, ``spec_decode_metrics`` (every candidate exports the counters and
drafted), ``spec_counters_consistent``, ``baseline_not_speculating``, and at temperature 0
with a baseline ``outputs_equal_plain``: at the lowest concurrency every candidate's
answers equal plain greedy decoding's, or part from it only at near-ties: where the plain
server's own logprobs, asked at the first differing token, put its token and the
speculative one within ``tie_margin`` nats (bfloat16 rounding in the verifier's
k+1-token pass; :mod:`pipeline.eagle3.serving.near_ties`). A SIGTERM or Ctrl-C stops
sending, keeps what was
measured (the result says how far it got) and fails the stage.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
from pathlib import Path

from pipeline.actions import StageResult, add_bool_arg, make_parser, run_action
from pipeline.eagle3.serving.cpu_sets import Placement, isolated
from pipeline.eagle3.serving.load_levels import Interrupted, Level, run_level
from pipeline.eagle3.serving.near_ties import DEFAULT_TIE_MARGIN, adjudicate
from pipeline.eagle3.serving.prompts import load_prompts, request_bodies
from pipeline.eagle3.serving.report import fmt
from pipeline.eagle3.serving.results import Server, conclude, read_sweep
from pipeline.eagle3.serving.roofline import describe, roofline, weight_bytes
from pipeline.eagle3.serving.sequential import Rule, least_trials, measure
from pipeline.eagle3.serving.trials import BASELINE, DEFAULT_CI_WIDTH, DEFAULT_CONFIDENCE
from pipeline.errors import ActionError
from pipeline.served_gates import BENCH_LEVELS
from pipeline.vllm.metrics import SpecSnapshot, spec_delta, spec_snapshot
from pipeline.vllm.openai_client import get

ACTION = "eagle3.benchmark"
SINGLE = "spec"  # the candidate's name when `url` is one server


def candidates_arg(text: str) -> dict[str, str]:
    """``http://h:8001`` (one candidate, named spec) or ``{"k3": URL, ...}`` (JSON)."""
    if not text.lstrip().startswith("{"):
        return {SINGLE: text}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a JSON mapping: {text!r} ({exc})") from None
    if not isinstance(value, dict) or not value or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items()):
        raise argparse.ArgumentTypeError("url must be a URL, or a mapping of candidate "
                                         "names to URLs")
    if BASELINE in value:
        raise argparse.ArgumentTypeError(f"{BASELINE!r} names the baseline_url: give the "
                                         "candidate another name")
    return value


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Benchmark speculative servers against the baseline over "
                            "repeated trials: tokens/s, TTFT, TPOT, ITL, served τ and "
                            "acceptance per position, answers against plain greedy, speedup "
                            "per concurrency with its spread. These are served numbers (the "
                            "engine's), not eagle3.verify's reference-loop bound.")
    p.add_argument("--url", required=True, type=candidates_arg,
                   help="the speculative server (http://127.0.0.1:8001), or a JSON mapping "
                        "of candidate names to servers; the first is the one gated")
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
                   help="at least this many requests per level (default 10x the "
                        "concurrency)")
    p.add_argument("--min-seconds", type=float, default=20.0,
                   help="each level sends requests for at least this long, then finishes "
                        "its pass over the prompts (0: exactly `requests`)")
    p.add_argument("--trials", type=int, default=4,
                   help="at least this many trials per level (an even number: each pair is "
                        "an ABBA block); 1 measures each level once, with no interval")
    p.add_argument("--max-trials", type=int, default=16,
                   help="no level takes more trials than this")
    p.add_argument("--ci-width", type=float, default=DEFAULT_CI_WIDTH,
                   help="a level takes trials until every candidate's interval of the "
                        "speedup is within this share of its estimate (0.05: +-5%%)")
    p.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE,
                   help="the interval's confidence level")
    p.add_argument("--level-budget", type=float, default=120.0,
                   help="seconds: no new pair of trials starts at a level after this long "
                        "(its interval is then reported as it is)")
    p.add_argument("--extra-budget", type=float, default=0.0,
                   help="seconds after the pass over the levels, for the levels that "
                        "stopped wide: one ABBA block at a time, the one nearest to "
                        "settling first (0: none)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--output-len", type=int, default=None,
                   help="every answer this many tokens (ignore_eos) instead of natural "
                        "lengths")
    p.add_argument("--temperature", type=float, default=0.0)
    add_bool_arg(p, "ignore-eos", False, "generate max_tokens every time (vLLM extension)")
    add_bool_arg(p, "return-token-ids", True, "ask for the generated token ids (vLLM "
                                              "extension), to compare answers exactly")
    p.add_argument("--tie-margin", type=float, default=DEFAULT_TIE_MARGIN,
                   help="nats: an answer that parts from plain greedy decoding passes where "
                        "plain's own logits put the two tokens at most this far apart "
                        "(bfloat16 rounding in the k+1-token verify pass); 0: every answer "
                        "must be equal")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured requests per server")
    p.add_argument("--request-timeout", type=float, default=600.0)
    add_bool_arg(p, "require-spec-metrics", True, "fail when a speculative server exports "
                                                  "no spec-decode counters")
    p.add_argument("--schedule-out", type=Path,
                   help="write the num_speculative_tokens_per_batch_size schedule chosen "
                        "from the candidates' speedups here (a sweep over k)")
    p.add_argument("--schedule-from", type=json.loads, default=None,
                   help="JSON list of the candidates the schedule chooses among (default: "
                        "all)")
    p.add_argument("--schedule-margin", type=float, default=0.0,
                   help="a k is scheduled only where it beats plain by more than this "
                        "(0.05: 5%%)")
    p.add_argument("--schedule-graphs", choices=("full", "piecewise"), default="full",
                   help="how the schedule's server will run CUDA graphs: full (vLLM's "
                        "default: vLLM 0.26 then starts only a schedule of one k, the best "
                        "over every level) or piecewise (its serve stage runs with "
                        "--compilation-config '{\"cudagraph_mode\": \"PIECEWISE\"}', "
                        "--enforce-eager or VLLM_USE_V2_MODEL_RUNNER=0: the fastest k per "
                        "level)")
    p.add_argument("--sweep", type=Path,
                   help="a sweep's schedule file: report the candidate against the best "
                        "fixed k it found at each level")
    p.add_argument("--verifier", type=Path,
                   help="the verifier's directory, for the roofline of plain decoding at "
                        "c=1 (default: the baseline server's model root, when it is a "
                        "directory on this host)")
    p.add_argument("--served-dtype", choices=("auto", "bfloat16", "float16", "float32"),
                   default="auto", help="the dtype the baseline server runs the weights in, "
                                        "for the roofline (auto: vLLM's, a float32 "
                                        "checkpoint in bfloat16)")
    p.add_argument("--gpu-name", help="the GPU the servers run on, as nvidia-smi names it "
                                      "(default: this host's first GPU)")
    add_bool_arg(p, "isolate-cpus", False,
                 "while measuring, pin each server on this host (the process tree behind "
                 "its port) and this client to CPUs of their own, in whole cores from the "
                 "GPU's NUMA node where it has enough; the old masks come back afterwards")
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


def _model_root(url: str, api_key: str | None) -> Path | None:
    """The directory the server loaded its model from, when it is one on this host."""
    answer = get(f"{url}/v1/models", timeout=10.0, api_key=api_key)
    try:
        root = answer.json()["data"][0].get("root") if answer.ok else None
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return Path(root) if isinstance(root, str) and Path(root).is_dir() else None


def _roofline(result: StageResult, args: argparse.Namespace, base: Server | None,
              api_key: str | None) -> None:
    """Weight bytes over plain decoding's TPOT at c=1, against the GPU's peak."""
    tpot = result.metrics.get("baseline_tpot_p50_ms_c1")
    if base is None or not isinstance(tpot, (int, float)) or tpot <= 0:
        return
    where = args.verifier or _model_root(base.url, api_key)
    weights = weight_bytes(where, args.served_dtype) if where is not None else None
    if weights is None:
        print("roofline: no weights to count (give `verifier`: the verifier's directory "
              "with its safetensors)", flush=True)
        return
    gpu = args.gpu_name
    if gpu is None:
        from pipeline.eagle3.preflight import find_gpus
        found, _how = find_gpus()
        gpu = found[0].name if found else None
    result.metrics["roofline"] = line = roofline(weights, float(tpot), gpu)
    print(describe(line), flush=True)
    if "share_of_peak" in line:
        result.summary += (f"; plain at c=1 reads its weights at {line['share_of_peak']:.1%} "
                           f"of the {line['gpu_model']}'s bandwidth")


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


def _report(level: Level) -> str:
    s = level.summary()
    line = (f"[trial {level.trial} c={level.concurrency}] {level.role}: {s['completed']}/"
            f"{s['requests']} ok{' (interrupted)' if level.interrupted else ''} in "
            f"{level.duration:.1f}s, {fmt(s['output_throughput'])} tok/s, TTFT p50 "
            f"{fmt(s['ttft_ms']['p50'], '.1f')} ms, TPOT p50 {fmt(s['tpot_ms']['p50'], '.2f')}"
            f" ms, ITL p50/p99 {fmt(s['itl_ms']['p50'], '.2f')}/"
            f"{fmt(s['itl_ms']['p99'], '.2f')} ms")
    if level.spec is not None and level.spec.present:
        line += (f", acceptance length {fmt(level.spec.acceptance_length, '.2f')}, rate "
                 f"{fmt(level.spec.acceptance_rate, '.2f')}")
    if s["host_busy"] is not None:
        line += f", host CPU {s['host_busy']:.0%} busy"
    if s["errors"]:
        line += f"; first error: {s['errors'][0]}"
    return line


def _check_args(args: argparse.Namespace) -> None:
    concurrency = args.concurrency
    if not isinstance(concurrency, list) or not concurrency or not all(
            isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in concurrency):
        raise ActionError(f"concurrency must be a list of positive integers, got "
                          f"{concurrency!r}")
    if args.samples is not None and args.samples < 1:
        raise ActionError(f"samples must be at least 1, got {args.samples}")
    if args.trials < 1:
        raise ActionError(f"trials must be at least 1, got {args.trials}")
    if args.min_seconds < 0:
        raise ActionError(f"min_seconds must be >= 0, got {args.min_seconds:g}")
    if args.requests is not None and args.requests < 1:
        raise ActionError(f"requests must be at least 1, got {args.requests}")
    if args.output_len is not None and args.output_len < 1:
        raise ActionError(f"output_len must be at least 1 token, got {args.output_len}")
    if args.max_trials < args.trials:
        raise ActionError(f"max_trials ({args.max_trials}) is below trials ({args.trials})")
    if not 0 < args.ci_width < 1:
        raise ActionError(f"ci_width is a share of the estimate between 0 and 1 (0.05 is "
                          f"+-5%), got {args.ci_width:g}")
    if not 0.5 <= args.confidence < 1:
        raise ActionError(f"confidence is a level between 0.5 and 1 (0.95), got "
                          f"{args.confidence:g}")
    if args.tie_margin < 0:
        raise ActionError(f"tie_margin is in nats and >= 0 (0: exact equality), got "
                          f"{args.tie_margin:g}")
    if args.level_budget <= 0:
        raise ActionError(f"level_budget must be > 0 seconds, got {args.level_budget:g}")
    if args.extra_budget < 0:
        raise ActionError(f"extra_budget must be >= 0 seconds, got {args.extra_budget:g}")
    chosen = args.schedule_from
    if chosen is not None and (not isinstance(chosen, list) or not all(
            isinstance(n, str) and n in args.url for n in chosen)):
        raise ActionError(f"schedule_from must list candidate names of `url` "
                          f"({', '.join(args.url)}), got {chosen!r}")
    if (chosen is not None or args.schedule_out is not None) and not args.baseline_url:
        raise ActionError("a schedule is chosen by speedup over plain: give baseline_url")
    if args.sweep is not None:
        read_sweep(args.sweep)  # a bad file fails now, not after the measuring


def run(args: argparse.Namespace) -> StageResult:
    result = StageResult(action=ACTION)
    _check_args(args)
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    prompts = load_prompts(args.prompts, exclude=args.exclude, samples=args.samples)
    print(f"{len(prompts)} prompts from {args.prompts}"
          + (f" (held out from {args.exclude})" if args.exclude else ""), flush=True)
    servers: list[Server] = []
    if args.baseline_url:
        base = _base(args.baseline_url)
        servers.append(Server(BASELINE, base, args.baseline_model or _served_model(
            base, api_key, "baseline")))
    for name, url in args.url.items():
        url = _base(url)
        what = "speculative" if name == SINGLE else f"speculative ({name})"
        servers.append(Server(name, url, args.model or _served_model(url, api_key, what)))
    bodies = {s.role: request_bodies(prompts, args, s.model) for s in servers}
    labels = {s.role: _metric_names(s.url, s.model, api_key) for s in servers}
    out_path = args.out or ((args.result.parent if args.result else Path.cwd()) / "bench.json")
    levels: list[Level] = []
    interrupted: Level | None = None
    plan = {c: args.requests or 10 * c for c in args.concurrency}
    rule = Rule(args.trials, args.max_trials, args.ci_width, args.confidence,
                args.level_budget, args.extra_budget)
    least = least_trials(args.trials)
    floor = least * len(args.concurrency) * len(servers) * args.min_seconds
    print("plan: per level (" + ", ".join(f"c={c}: >= {n} requests" for c, n in plan.items())
          + f"), {'one trial' if least == 1 else f'{least} to {args.max_trials} trials'} of "
          f"{len(servers)} server(s), each run >= {args.min_seconds:g} s"
          + ("" if least == 1 else f", ABBA order, until the {args.confidence:.0%} interval "
             f"is within +-{args.ci_width:.0%} or {args.level_budget:g} s of the level have "
             "passed" + (f", then up to {args.extra_budget:g} s more for the levels still "
                         "wide" if args.extra_budget > 0 else ""))
          + (f": at least {floor:.0f} s" if floor else ""), flush=True)
    stops: dict[int, str] = {}
    placement: Placement | None = None

    def one(server: Server, c: int, trial: int) -> Level:
        level = Level(server.role, server.url, c, plan[c], trial=trial)
        before = _scrape(server.url, labels[server.role], api_key)
        try:
            run_level(level, bodies[server.role], timeout=args.request_timeout,
                      api_key=api_key, min_seconds=args.min_seconds)
        except Interrupted:
            levels.append(level)
            raise
        finally:
            try:
                level.spec = spec_delta(before, _scrape(server.url, labels[server.role],
                                                        api_key))
            except (ActionError, KeyboardInterrupt):
                level.spec = None
        print(_report(level), flush=True)
        return level

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with isolated({s.role: s.url for s in servers},
                      enabled=args.isolate_cpus) as placement:
            if args.isolate_cpus:
                print(placement.describe(), flush=True)
            for server in servers:
                if args.warmup > 0:
                    warm = Level(server.role, server.url, 1, args.warmup, trial=0)
                    run_level(warm, bodies[server.role], timeout=args.request_timeout,
                              api_key=api_key)
                    print(f"warm-up {server.role}: {len(warm.ok)}/{args.warmup} ok",
                          flush=True)
            stops = measure(servers, args.concurrency, rule, one, levels,
                            [p.id for p in prompts], out=lambda line: print(line, flush=True))
    except Interrupted as exc:
        interrupted = exc.level
        print(_report(exc.level), flush=True)
    except KeyboardInterrupt:
        interrupted = levels[-1] if levels else Level("setup", "-", 0, 0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    plain = next((s for s in servers if s.role == BASELINE), None)
    # an interrupted run fails anyway, and its servers may be going: nothing to ask them
    judge = None if plain is None or interrupted is not None else functools.partial(
        adjudicate, base_url=plain.url, model=plain.model, api_key=api_key)
    conclude(result, levels, servers, args, out_path=out_path, interrupted=interrupted,
             prompt_ids=[p.id for p in prompts], stops=stops,
             planned=least * len(servers) * sum(plan.values()), judge=judge)
    if args.isolate_cpus and placement is not None:
        result.metrics["cpu_isolation"] = placement.to_json()
    _roofline(result, args, plain, api_key)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
