"""Our served benchmark against vLLM's own, ``vllm bench serve``, back to back on the same
servers, prompts, lengths and concurrency.

For each concurrency, and at each for the plain server and then the speculative one, it
runs one level of our client (``pipeline.eagle3.serving.load_levels``: at least ``--min-seconds``,
ending at a whole pass over the prompts) and then ``vllm bench serve`` with exactly the
requests ours sent: the same prompts in the same order (a ``custom`` dataset written from
them, ``--disable-shuffle``, ``--skip-chat-template``), the same ``max_tokens``
(``--custom-output-len``; with ``--output-len`` both ignore EOS), temperature 0, the same
``--max-concurrency``, everything sent at once (``--request-rate inf``). It prints one
table: tokens/s, TPOT, ITL and TTFT of both and how far ours is from vLLM's, and the
speedup each client measures.

The definitions are made to match vLLM's (``vllm/benchmarks/serve.py``, 0.26.0):

- tokens/s: the server's ``usage.completion_tokens`` summed over the level, over the wall
  time from the first request sent to the last answer (both);
- TPOT: per request ``(latency - TTFT) / (tokens - 1)``, the median over requests; latency
  ends at the last data event before ``[DONE]`` in both;
- ITL: the gaps between successive stream chunks that carry a choice, pooled over the
  level's requests. vLLM's list also has the gap between its role chunk and the first
  text, which vLLM sends in the same engine step (about 0), one per request;
- TTFT: ours is the first chunk with text, vLLM's the first chunk with a choice (its role
  chunk, sent with the first output, microseconds before it).

Where the two differ by more than ``--tolerance`` (5%) on tokens/s or TPOT the row says so.
vLLM's client is asyncio in one thread and ours threads; both pool one keep-alive
connection per request slot.

    # vLLM in this interpreter, two servers up (docs/serving.md, "vLLM's own benchmark")
    python -m bench.serving.served_reference --baseline-url http://127.0.0.1:8000 \\
        --url http://127.0.0.1:8005 --prompts data/prompts.jsonl --tokenizer verifier \\
        --concurrency 1,4,16,64 --max-tokens 128 --min-seconds 10 --vllm-python python3

``--vllm-cli`` runs ``PYTHON -m vllm.entrypoints.cli.main bench serve`` for every level
instead of the driver (bench/serving/vllm_bench_driver.py), which runs vLLM's parser and
``main`` for every level in one process (vLLM imported once, not once per level).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipeline.eagle3.serving.cpu_sets import isolated
from pipeline.eagle3.serving.load_levels import Level, run_level
from pipeline.eagle3.serving.prompts import Prompt, load_prompts, request_bodies
from pipeline.eagle3.serving.trials import interval
from pipeline.vllm.metrics import spec_delta, spec_snapshot
from pipeline.vllm.openai_client import get

DRIVER = Path(__file__).with_name("vllm_bench_driver.py")
# (our Level.summary() path, vLLM's result key, label)
FIGURES = (("tok_s", ("output_throughput",), "output_throughput", "tok/s"),
           ("tpot_p50", ("tpot_ms", "p50"), "median_tpot_ms", "TPOT p50"),
           ("itl_p50", ("itl_ms", "p50"), "median_itl_ms", "ITL p50"),
           ("itl_p99", ("itl_ms", "p99"), "p99_itl_ms", "ITL p99"),
           ("ttft_p50", ("ttft_ms", "p50"), "median_ttft_ms", "TTFT p50"),
           ("ttft_p99", ("ttft_ms", "p99"), "p99_ttft_ms", "TTFT p99"))
HELD = ("tok_s", "tpot_p50")  # where a gap over the tolerance must be explained


class Refused(Exception):
    """Bad input, said in one line."""


def _text(p: Prompt) -> str:
    """The one user message vLLM's custom dataset sends for a prompt."""
    if p.messages is None:
        return p.text or ""
    if len(p.messages) != 1 or p.messages[0]["role"] != "user":
        raise Refused(f"prompt {p.id} has {len(p.messages)} messages: vllm bench serve's "
                      "custom dataset sends one user message, so both clients can only "
                      "send the same request for a single user message")
    return p.messages[0]["content"]


class VllmBench:
    """vLLM's ``bench serve``: one driver process for every run, or the CLI per run."""

    def __init__(self, python: str, cli: bool, log: Path, env: dict[str, str]):
        self.python, self.cli, self.env = python, cli, env
        self.log = open(log, "a")  # noqa: SIM115 - closed in close()
        self.proc: subprocess.Popen[str] | None = None

    def run(self, argv: list[str]) -> None:
        if self.cli:
            code = subprocess.run([self.python, "-m", "vllm.entrypoints.cli.main", "bench",
                                   "serve", *argv], stdout=self.log, stderr=subprocess.STDOUT,
                                  env=self.env, text=True).returncode
        else:
            code = self._driver(argv)
        if code != 0:
            raise Refused(f"vllm bench serve failed (exit {code}); its output is in "
                          f"{self.log.name}")

    def _driver(self, argv: list[str]) -> int:
        if self.proc is None:
            self.proc = subprocess.Popen([self.python, str(DRIVER)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.log, text=True,
                                         env=self.env, bufsize=1)
            self._until("@@ready")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        return int(self._until("@@done").split()[1])

    def _until(self, mark: str) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(mark):
                return line.strip()
            self.log.write(line)
            self.log.flush()
        raise Refused(f"the vllm bench driver ended before {mark}; its output is in "
                      f"{self.log.name}")

    def close(self) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(60)
        self.log.close()


def _ours(url: str, bodies: list[tuple[str, dict[str, Any]]], c: int, args: argparse.Namespace
          ) -> tuple[Level, dict[str, Any]]:
    level = Level("ours", url, c, args.requests or 10 * c)
    before = spec_snapshot(get(f"{url}/metrics").body.decode("utf-8", "replace"))
    run_level(level, bodies, timeout=600.0, api_key=None, min_seconds=args.min_seconds)
    level.spec = spec_delta(before, spec_snapshot(get(f"{url}/metrics").body.decode(
        "utf-8", "replace")))
    if level.failed:
        raise Refused(f"our client: {len(level.failed)} request(s) failed at c={c} on {url}: "
                      f"{level.failed[0].error}")
    return level, level.summary()


def _vllm(bench: VllmBench, url: str, texts: list[str], n: int, c: int,
          args: argparse.Namespace, work: Path, tag: str) -> dict[str, Any]:
    dataset = work / f"{tag}.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": texts[i % len(texts)]}) + "\n"
                               for i in range(n)))
    length = args.output_len or args.max_tokens
    argv = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
            "--base-url", url, "--tokenizer", args.tokenizer, "--dataset-name", "custom",
            "--dataset-path", str(dataset), "--custom-output-len", str(length),
            "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(n),
            "--max-concurrency", str(c), "--request-rate", "inf", "--temperature", "0",
            "--num-warmups", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--disable-tqdm", "--save-result",
            "--result-dir", str(work), "--result-filename", f"{tag}.json"]
    if args.output_len:
        argv.append("--ignore-eos")
    bench.run(argv)
    return json.loads((work / f"{tag}.json").read_text())


def _figure(summary: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = summary
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def _geomean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return statistics.geometric_mean(xs) if xs else None


def _row(c: int, server: str, rounds: list[tuple[Level, dict[str, Any], dict[str, Any]]],
         tolerance: float) -> dict[str, Any]:
    """One row from every round of (ours, our summary, vLLM's result) at ``c``: each
    figure the geometric mean over rounds, and how far ours is from vLLM's the geometric
    mean of the rounds' ratios, with its 95% t interval from two rounds on."""
    summaries = [s for _, s, _ in rounds]
    theirs = [t for _, _, t in rounds]
    spec = [lv.spec for lv, _, _ in rounds if lv.spec is not None and lv.spec.present]
    taus = [x.acceptance_length for x in spec if x.acceptance_length is not None]
    row: dict[str, Any] = {"concurrency": c, "server": server, "rounds": len(rounds),
                           "requests": sum(s["requests"] for s in summaries),
                           "vllm_requests": sum(int(t.get("completed") or 0) for t in theirs),
                           "tokens": sum(s["output_tokens"] for s in summaries),
                           "vllm_tokens": sum(int(t.get("total_output_tokens") or 0)
                                              for t in theirs),
                           "tau": _geomean(taus),
                           "vllm_tau": _geomean([t.get("spec_decode_acceptance_length")
                                                 for t in theirs])}
    for key, path, vkey, _label in FIGURES:
        mine = [_figure(s, path) for s in summaries]
        other = [t.get(vkey) for t in theirs]
        row[key], row[f"vllm_{key}"] = _geomean(mine), _geomean(other)
        row[f"{key}_rounds"], row[f"vllm_{key}_rounds"] = mine, other
        ratios = [a / b for a, b in zip(mine, other, strict=True) if a and b]
        ci = interval(ratios)
        row[f"{key}_diff"] = None if ci.estimate is None else ci.estimate - 1
        row[f"{key}_diff_ci"] = (None if ci.low is None or ci.high is None else
                                 [ci.low - 1, ci.high - 1])
    row["over"] = [k for k in HELD if row[f"{k}_diff"] is not None
                   and abs(row[f"{k}_diff"]) > tolerance]
    return row


def _cell(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _pair(r: dict[str, Any], key: str, spec: str = ".2f") -> str:
    return f"{_cell(r[key], spec)}/{_cell(r['vllm_' + key], spec)}"


def _diff(r: dict[str, Any], key: str) -> str:
    """How far ours is from vLLM's, with the rounds' interval when there is one."""
    d, ci = r[f"{key}_diff"], r.get(f"{key}_diff_ci")
    cell = _cell(None if d is None else 100 * d, "+.1f") + "%"
    return cell if not ci else f"{cell} ({100 * ci[0]:+.1f}..{100 * ci[1]:+.1f})"


def render(rows: list[dict[str, Any]], tolerance: float) -> str:
    head = ["c", "server", "rounds", "requests", "tok/s ours", "vLLM", "diff", "TPOT p50 ours",
            "vLLM", "diff", "ITL p50 ours/vLLM", "ITL p99 ours/vLLM", "TTFT p50 ours/vLLM",
            "TTFT p99 ours/vLLM", "τ ours/vLLM", "speedup ours/vLLM", "verdict"]
    body = []
    base: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["server"] == "plain":
            base[r["concurrency"]] = r
        b = base.get(r["concurrency"]) if r["server"] != "plain" else None
        speedup = "-" if b is None else (
            f"{_cell(r['tok_s'] / b['tok_s'], '.2f')}x/"
            f"{_cell(r['vllm_tok_s'] / b['vllm_tok_s'], '.2f')}x")
        verdict = "ok" if not r["over"] else "> {:.0%}: {}".format(tolerance,
                                                                  ", ".join(r["over"]))
        body.append([str(r["concurrency"]), r["server"], str(r.get("rounds", 1)),
                     f"{r['requests']}/{r['vllm_requests']}",
                     _cell(r["tok_s"], ".0f"), _cell(r["vllm_tok_s"], ".0f"),
                     _diff(r, "tok_s"),
                     _cell(r["tpot_p50"], ".3f"), _cell(r["vllm_tpot_p50"], ".3f"),
                     _diff(r, "tpot_p50"),
                     *(_pair(r, k) for k in ("itl_p50", "itl_p99", "ttft_p50", "ttft_p99")),
                     _pair(r, "tau", ".3f"), speedup, verdict])
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    line = lambda cells: " | ".join(c.rjust(w) for c, w in zip(cells, widths,  # noqa: E731
                                                                 strict=True))
    return "\n".join([line(head), "-+-".join("-" * w for w in widths), *map(line, body)])


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline-url", required=True, help="the plain server")
    p.add_argument("--url", required=True, help="the speculative server")
    p.add_argument("--name", default="spec", help="the speculative server's name in the table")
    p.add_argument("--prompts", type=Path, required=True)
    p.add_argument("--exclude", type=Path)
    p.add_argument("--samples", type=int)
    p.add_argument("--tokenizer", required=True,
                   help="the verifier directory (vllm bench serve counts prompts with it)")
    p.add_argument("--concurrency", default="1,4,16,64")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--output-len", type=int, default=None)
    p.add_argument("--min-seconds", type=float, default=10.0)
    p.add_argument("--requests", type=int, default=None, help="at least (default 10 x c)")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds per level: each runs both servers with both clients, the "
                        "order turned round every other round (plain then spec, ours then "
                        "vLLM's; then the reverse), so that the host's drift cancels; the "
                        "table holds the geometric means and the diff's 95%% interval")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--vllm-python", default=sys.executable,
                   help="the interpreter that has vLLM (default: this one)")
    p.add_argument("--vllm-pythonpath", default=None,
                   help="PYTHONPATH for it (a folder with vLLM's benchmark modules)")
    p.add_argument("--vllm-cli", action="store_true",
                   help="run `vllm.entrypoints.cli.main bench serve` per level")
    p.add_argument("--isolate-cpus", action="store_true",
                   help="pin each server and the clients to CPUs of their own while "
                        "measuring, as the benchmark's isolate_cpus does")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the figures (reference.json) and vLLM's output")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.rounds < 1:
        print(f"error: --rounds: at least 1, got {args.rounds}", file=sys.stderr)
        return 2
    try:
        levels = [int(x) for x in str(args.concurrency).split(",") if x.strip()]
        if not levels or min(levels) < 1:
            raise ValueError
    except ValueError:
        print(f"error: --concurrency: a comma list of positive integers, got "
              f"{args.concurrency!r}", file=sys.stderr)
        return 2
    work = args.out or Path(tempfile.mkdtemp(prefix="served-reference-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.vllm_pythonpath:
        env["PYTHONPATH"] = args.vllm_pythonpath
    bench = VllmBench(args.vllm_python, args.vllm_cli, work / "vllm-bench.log", env)
    rows: list[dict[str, Any]] = []
    pins = contextlib.ExitStack()
    try:
        if args.isolate_cpus:
            placed = pins.enter_context(isolated({"plain": args.baseline_url,
                                                  args.name: args.url}))
            print(placed.describe(), flush=True)
        prompts = load_prompts(args.prompts, exclude=args.exclude, samples=args.samples)
        texts = [_text(p) for p in prompts]
        same = [Prompt(p.id, text=t) for p, t in zip(prompts, texts, strict=True)]
        ns = argparse.Namespace(endpoint="chat", reasoning=None, tokenizer=None,
                                max_tokens=args.max_tokens, output_len=args.output_len,
                                ignore_eos=False, return_token_ids=False, temperature=0.0)
        servers = [("plain", args.baseline_url.rstrip("/")), (args.name, args.url.rstrip("/"))]
        bodies = {}
        for name, url in servers:
            model = str(get(f"{url}/v1/models").json()["data"][0]["id"])
            bodies[name] = request_bodies(same, ns, model)
            if args.warmup:
                run_level(Level("warmup", url, 1, args.warmup), bodies[name], timeout=600.0,
                          api_key=None)
        for c in levels:
            done: dict[str, list[tuple[Level, dict[str, Any], dict[str, Any]]]] = {
                name: [] for name, _ in servers}
            sent: dict[str, int] = {}
            for r in range(1, args.rounds + 1):
                forward = r % 2 == 1
                for name, url in (servers if forward else servers[::-1]):
                    tag = f"c{c}-{name}" + (f"-r{r}" if args.rounds > 1 else "")
                    if forward or name not in sent:
                        level, summary = _ours(url, bodies[name], c, args)
                        sent[name] = len(level.records)
                        theirs = _vllm(bench, url, texts, sent[name], c, args, work, tag)
                    else:  # vLLM's first: the requests ours sent last round
                        theirs = _vllm(bench, url, texts, sent[name], c, args, work, tag)
                        level, summary = _ours(url, bodies[name], c, args)
                    done[name].append((level, summary, theirs))
                    print(f"c={c} {name}" + (f" round {r}" if args.rounds > 1 else "")
                          + f": ours {summary['output_throughput']:.0f} tok/s, vLLM "
                          f"{theirs.get('output_throughput', 0):.0f} tok/s over "
                          f"{summary['requests']} requests", flush=True)
            rows.extend(_row(c, name, done[name], args.tolerance) for name, _ in servers)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        bench.close()
        pins.close()
    (work / "reference.json").write_text(json.dumps({"rows": rows, "config": {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}, indent=1))
    length = (f"{args.output_len} tokens each (ignore_eos)" if args.output_len else
              f"natural, at most {args.max_tokens} tokens")
    rounds = (f"{args.rounds} rounds a level, the order turned every other round; figures: "
              "geometric means over rounds; diff: the rounds' ratios, with their 95% interval"
              if args.rounds > 1 else "one round a level")
    print(f"ours against vllm bench serve (the same requests, back to back; {rounds}; "
          f"lengths: {length}; diff = ours over vLLM's - 1; ms except tok/s):")
    print(render(rows, args.tolerance))
    over = [r for r in rows if r["over"]]
    print(f"{len(over)} of {len(rows)} rows differ by more than {args.tolerance:.0%} on "
          f"tokens/s or TPOT; figures in {work / 'reference.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
