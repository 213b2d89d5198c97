"""Action ``eagle3.verify``: does this drafter checkpoint work, measured, before serving it?

Three layers of named checks, each with the measured value, the expected value and a line
saying what to do:

1. structural (:mod:`pipeline.eagle3.checks.structural`): config, keys, shapes, dtypes, NaN/Inf, the
   ``d2t``/``t2d`` invariants and lm_head rows against the verifier's; seconds, no GPU,
   weights streamed one tensor at a time;
2. compatibility (:mod:`pipeline.eagle3.checks.compat`): the host's vLLM asked whether it serves this pair
   (the table of known rules when vLLM is absent, said as such);
3. functional (:mod:`pipeline.eagle3.checks.functional`, with ``--functional``, the default): on held-out
   prompts, teacher-forced per-position acceptance, a free-running greedy chain
   speculative decoding loop that must reproduce plain greedy decoding token for token,
   vLLM's acceptance metrics, the measured cost of draft and verify steps and the
   projected speedup; against an untrained drafter and, with ``--previous``, an earlier
   checkpoint.

Metrics the gate reads (``gate: {min_acceptance_length: 2.0, min_position_acceptance:
0.6}``): ``acceptance_length`` (= ``tau``) and ``position_acceptance`` (=
``acceptance_per_position``, vLLM's per-position rates), declared in
``pipeline.actions.ACTION_METRICS``. The speed figures are the reference loop's:
``reference_speedup_bound`` (its wall clock; the loop runs Python between steps and no CUDA
graphs, so no engine reaches it) and ``projected_speedup`` (from its median step costs).
They are reported and shown, labelled, but refused as gates (:mod:`pipeline.served_gates`):
speed is held on the served benchmark (``min_served_speedup`` on ``eagle3.benchmark``).
On a CPU they are even less telling: the summary says so, and ``metric_notes`` carries it.
The summary line carries the headline numbers; ``sha256`` is the checkpoint's weights'.

    python -m pipeline.eagle3.verify --checkpoint drafter --verifier verifier \\
        --data data/prompts.jsonl --exclude data/generated/samples.jsonl --k 3 [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from pipeline.actions import (
    StageResult,
    add_bool_arg,
    check_status,
    json_arg,
    make_parser,
    print_checks,
    table_note,
    write_result,
)
from pipeline.eagle3.common import add_threads_arg, use_threads
from pipeline.eagle3.hardware.placement import add_placement_args
from pipeline.errors import ActionError
from pipeline.series import emit
from pipeline.served_gates import VERIFY_K

ACTION = "eagle3.verify"
DTYPES = ("auto", "float32", "bfloat16", "float16")


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Verify an EAGLE-3 drafter checkpoint: structure, vLLM "
                            "compatibility, and measured acceptance (its speed figures are the "
                            "reference loop's, an upper bound, not served).")
    p.add_argument("--checkpoint", type=Path, required=True,
                   help="exported drafter directory (eagle or speculators format), a "
                        "training checkpoint, or train's output directory (its latest)")
    p.add_argument("--verifier", type=Path, required=True, help="the verifier (HF directory)")
    p.add_argument("--data", type=Path, default=None,
                   help="held-out prompts: a JSONL file (generate's prompt shapes, or "
                        "samples whose answer is dropped) or tokenize's output directory")
    p.add_argument("--exclude", type=Path, default=None,
                   help="JSONL of training samples: prompts with their ids or user text "
                        "are skipped")
    p.add_argument("--samples", type=int, default=16, help="held-out prompts to decode")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--k", type=int, default=VERIFY_K, help="draft tokens per verify step")
    add_bool_arg(p, "functional", True, "run the functional checks (needs --data)")
    p.add_argument("--previous", type=Path, default=None,
                   help="an earlier checkpoint to compare against (a baseline)")
    add_bool_arg(p, "baselines-free-running", True,
                 "also run the free-running loop for the baselines (else teacher forcing)")
    add_bool_arg(p, "probe", True, "teacher-forced acceptance at aux ids shifted by one")
    p.add_argument("--min-gain", type=float, default=0.1,
                   help="acceptance length the checkpoint must gain over an untrained one")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="compute dtype of the functional checks (float32 keeps greedy "
                        "ties rare; auto is bf16 on a GPU)")
    add_placement_args(p, tp=False)
    p.add_argument("--seed", type=int, default=0, help="seed of the untrained baseline")
    p.add_argument("--vllm-python", default=None,
                   help="interpreter of the vLLM that will serve (default: this one)")
    p.add_argument("--vllm-version", default=None,
                   help="vLLM version for the fallback table when vLLM is not importable")
    p.add_argument("--vllm-command", type=json_arg, default=None,
                   help='vLLM executable as a JSON list, e.g. ["/opt/vllm/bin/vllm"] (its '
                        "--version picks the fallback rules)")
    add_bool_arg(p, "require-vllm", False,
                 "fail when no vLLM can be asked (the fallback table is not enough)")
    p.add_argument("--json", action="store_true",
                   help="print the result as JSON on stdout (progress goes to stderr)")
    add_threads_arg(p)
    return p


def _command(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return value
    raise ActionError("--vllm-command must be a JSON list of strings")


def run(args: argparse.Namespace, log: Any = None) -> StageResult:
    from pipeline.eagle3.checks.compat import compatibility_checks
    from pipeline.eagle3.checks.structural import structural_checks
    from pipeline.eagle3.model.checkpoint_files import (
        VerifierInfo,
        resolve_checkpoint_dir,
        sha256_files,
    )

    log = log or (lambda msg: print(msg, flush=True))
    t0 = time.perf_counter()
    result = StageResult(action=ACTION)
    if args.k < 1:
        raise ActionError(f"--k must be at least 1, got {args.k}")
    if args.functional and args.data is None:
        raise ActionError("the functional checks need held-out prompts: give --data (or "
                          "--no-functional)")
    if args.functional:
        from pipeline.eagle3.hardware.placement import placement_from_args

        placement_from_args(args, None)  # a bad flag fails before any check runs
    verifier = VerifierInfo.read(Path(args.verifier))
    checkpoint = resolve_checkpoint_dir(Path(args.checkpoint)).resolve()

    structural = structural_checks(checkpoint, verifier)
    layout = structural.layout
    assert layout is not None
    digest, per_file = sha256_files(structural.files)
    result.checks += structural.checks
    result.metrics.update(structural.metrics)
    result.metrics.update({"checkpoint": str(checkpoint), "sha256": digest,
                           "weight_files": per_file, "verifier": str(args.verifier)})
    if structural.skipped:
        result.metrics["skipped_checks"] = structural.skipped
    bad = structural.failed()
    log(f"[verify] structural: {len(structural.checks) - len(bad)}/{len(structural.checks)} "
        f"passed in {structural.metrics['structural_seconds']:.2f}s"
        + (f"; failed: {', '.join(c.name for c in bad)}" if bad else ""))

    compat, compat_metrics = compatibility_checks(
        verifier, layout, checkpoint, python=args.vllm_python, version=args.vllm_version,
        command=_command(args.vllm_command), require_vllm=args.require_vllm)
    result.checks += compat
    result.metrics.update(compat_metrics)
    log(f"[verify] compatibility ({compat_metrics['vllm_compat_source']}): "
        + ", ".join(f"{c.name} {_word(c)}" for c in compat))

    functional: list[Any] = []
    headline = ""
    if args.functional:
        functional, headline = _functional(args, checkpoint, layout, result, log)
        result.checks += functional
    result.metrics["check_layers"] = {
        "structural": [c.name for c in structural.checks],
        "compatibility": [c.name for c in compat],
        "functional": [c.name for c in functional]}
    result.metrics["verify_seconds"] = round(time.perf_counter() - t0, 2)
    result.artifacts.append(str(checkpoint))
    failed = [c.name for c in result.checks if not c.passed]
    tail = f"failed: {', '.join(failed)}" if failed else "all checks passed"
    table = table_note(result.checks)
    tail += f"; {table}" if table else ""
    result.summary = f"{headline}; {tail}" if headline else f"verify: {tail}"
    return result


def _word(c: Any) -> str:
    return {"PASS": "ok", "FAIL": "FAILED", "TABLE": "from the table"}[check_status(c)]


def _functional(args: argparse.Namespace, checkpoint: Path, layout: Any,
                result: StageResult, log: Any) -> tuple[list[Any], str]:
    import torch

    from pipeline.eagle3.checks.functional import FunctionalSettings, run_functional
    from pipeline.eagle3.common import load_tokenizer, pick_device, pick_dtype
    from pipeline.eagle3.hardware.memory_plan import Workload, load_placed
    from pipeline.eagle3.hardware.placement import placement_from_args
    from pipeline.eagle3.text.heldout import load_heldout

    placement = placement_from_args(args, pick_device(args.device))
    device = placement.device
    dtype = pick_dtype(args.dtype, device)
    if device.type == "cuda" and dtype == torch.float32:
        # Exact fp32 matmuls: TF32 rounding would make greedy ties (and mismatches) likelier.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    tokenizer = load_tokenizer(Path(args.verifier))
    prompts, counts = load_heldout(Path(args.data), tokenizer, samples=args.samples,
                                   exclude=args.exclude)
    result.metrics["heldout"] = {**counts, "used": len(prompts), "data": str(args.data)}
    log(f"[verify] {len(prompts)} held-out prompts from {args.data} ({counts['excluded']} "
        f"excluded as training data); verifier {placement.describe()} in "
        f"{str(dtype).removeprefix('torch.')}")
    longest = max(len(p.ids) for p in prompts) + args.max_new_tokens + args.k + 1
    work = Workload(batch=1, seq=longest, kv_tokens=longest, logits_rows=longest)
    # The functional checks read the embedding and lm_head weights themselves.
    placed = load_placed(Path(args.verifier), dtype, placement, work, log,
                         keep=["model.embed_tokens", "lm_head"])
    verifier = placed.model
    result.metrics["memory_plan"] = placed.plan.to_json()
    settings = FunctionalSettings(k=args.k, max_new_tokens=args.max_new_tokens,
                                  seed=args.seed, min_gain=args.min_gain,
                                  baselines_free_running=args.baselines_free_running,
                                  probe=args.probe)
    checks, metrics, headline = run_functional(
        verifier=verifier, tokenizer=tokenizer, checkpoint=checkpoint, layout=layout,
        previous=args.previous, prompts=prompts, settings=settings, device=device,
        dtype=dtype, log=log)
    result.metrics.update(metrics)
    result.metrics["device"] = str(device)
    _series(metrics, checkpoint, args.previous)
    return checks, headline


def _series(metrics: dict[str, Any], checkpoint: Path, previous: Path | None) -> None:
    """τ per checkpoint, oldest first (untrained, previous, this one; free-running where
    it was run, and teacher-forced), and acceptance per position, one line each."""
    named = [("untrained", "untrained_"), (previous.name if previous else "", "previous_"),
             (checkpoint.name, "")]
    for name, prefix in named:
        if not name:
            continue
        if f"{prefix}acceptance_length" in metrics:
            emit("tau", name, metrics[f"{prefix}acceptance_length"], axis="checkpoint")
        if f"{prefix}teacher_forced_tau" in metrics:
            emit("tau_teacher_forced", name, metrics[f"{prefix}teacher_forced_tau"],
                 axis="checkpoint")
    for name, prefix in named:
        rates = metrics.get(f"{prefix}acceptance_per_position") if name else None
        for k, rate in enumerate(rates or [], start=1):
            emit("acceptance", k, rate, axis="position", labels={"checkpoint": name})


def main(argv: list[str] | None = None) -> int:
    """Like :func:`pipeline.actions.run_action`, plus ``--json``: the result on stdout,
    everything else on stderr."""
    parser = build_parser()
    args = parser.parse_args(argv)
    out = sys.stdout
    try:
        with redirect_stdout(sys.stderr if args.json else sys.stdout):
            use_threads(args)
            result = run(args)
            print_checks(result.checks)
            print(result.summary, flush=True)
    except ActionError as exc:
        result = StageResult(action=ACTION, error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    write_result(result, args.result)
    if args.json:
        out.write(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
