"""Action ``eagle3.generate``: answer prompts with the verifier; keep its reasoning.

Input: prompts JSONL in a documented shape (:mod:`pipeline.eagle3.text.chat`). Output: ``OUT/samples.jsonl``, one
sample a line::

    {"id": "q00001", "messages": [..prompt.., {"role": "assistant", "content": "<think>..</think>.."}],
     "finish_reason": "stop"|"length", "reasoning": true, "backend": "local"|"openai",
     "completion_tokens": 42}

and ``OUT/failed.jsonl`` for requests that failed for good. Backends: ``local`` (transformers,
batched, left-padded) and ``openai`` (an OpenAI-compatible endpoint such as ``vllm serve``,
with ``--concurrency`` threads, retries with backoff). Resumable: prompts whose id is already
in ``samples.jsonl`` are skipped; ``OUT/.config.json`` refuses a resume under other settings.

Reasoning returned apart (``reasoning_content`` / ``reasoning``) is put back as ``<think>``
reasoning ``</think>`` answer. Check ``reasoning_capture``: when the verifier reasons, the share
of samples whose reasoning was kept must reach ``--min-reasoning-capture`` (default 1.0).

The local backend places a verifier bigger than one device with ``--device-map``/
``--max-memory`` or ``--tp-plan auto`` under torchrun (rank 0 writes), printing the memory
plan (weights, activations and the KV cache at ``--batch-size``) first (:mod:`pipeline.eagle3.hardware.placement`).
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, make_parser, run_action
from pipeline.eagle3.common import (
    DTYPES,
    Progress,
    add_threads_arg,
    atomic_write_text,
    guard_config,
    load_tokenizer,
    log,
    pick_device,
    pick_dtype,
    read_jsonl,
    use_threads,
)
from pipeline.eagle3.hardware.distributed import rank
from pipeline.eagle3.hardware.placement import add_placement_args, placement_from_args
from pipeline.eagle3.text.chat import THINK_OPEN, Prompt, assemble, parse_prompt
from pipeline.errors import ActionError

ACTION = "eagle3.generate"
SAMPLES, FAILED = "samples.jsonl", "failed.jsonl"


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Answer prompts with the verifier; keep its reasoning.")
    p.add_argument("--prompts", type=Path, required=True, help="prompts JSONL")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--backend", choices=("local", "openai"), default="local")
    p.add_argument("--verifier", type=Path, default=None,
                   help="verifier directory (local backend: the model; openai: its tokenizer, "
                        "used only to tell whether it reasons)")
    p.add_argument("--samples", type=int, default=None, help="answer at most this many prompts")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=32, help="local backend")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", choices=DTYPES)
    add_placement_args(p)
    p.add_argument("--endpoint", default=None, help="openai: base URL, e.g. http://host:8000/v1")
    p.add_argument("--model", default=None, help="openai: served model name")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="openai: environment variable holding the key (never logged)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--retries", type=int, default=5)
    p.add_argument("--retry-delay", type=float, default=1.0, help="seconds; doubles each retry")
    p.add_argument("--request-timeout", type=float, default=600.0)
    p.add_argument("--expect-reasoning", choices=("auto", "yes", "no"), default="auto",
                   help="auto: yes when the verifier's tokenizer knows <think>, else when any "
                        "sample reasoned")
    p.add_argument("--min-reasoning-capture", type=float, default=1.0)
    add_threads_arg(p)
    return p


def load_prompts(path: Path, limit: int | None) -> list[Prompt]:
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for lineno, obj in read_jsonl(path):
        prompt = parse_prompt(obj, where=f"{path}:{lineno}")
        if prompt.id in seen:
            raise ActionError(f"duplicate prompt id {prompt.id!r} (first on line "
                              f"{seen[prompt.id]})", where=f"{path}:{lineno}")
        seen[prompt.id] = lineno
        prompts.append(prompt)
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise ActionError("no prompts", where=str(path))
    return prompts


def existing_ids(out: Path, repair: bool = True) -> set[str]:
    """Ids already answered. A torn last line (a crash mid-write) is set aside, not lost
    (``repair``; the file is replaced atomically, so a tensor-parallel rank reading it at
    the same time sees the same answered ids either way)."""
    path = out / SAMPLES
    if not path.exists():
        return set()
    good, torn = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            good.append(json.loads(line)) if line.strip() else None
        except json.JSONDecodeError:
            torn.append(line)
    if torn and repair:
        qdir = out / "quarantine"
        qdir.mkdir(parents=True, exist_ok=True)
        with (qdir / "torn-lines.txt").open("a", encoding="utf-8") as fh:
            fh.write("\n".join(torn) + "\n")
        atomic_write_text(path, "".join(json.dumps(s, ensure_ascii=False) + "\n"
                                        for s in good))
        log(f"[generate] set {len(torn)} torn line(s) aside in {qdir / 'torn-lines.txt'}")
    return {str(s.get("id")) for s in good}


def sample_record(prompt: Prompt, content: str, reasoning: str | None, finish_reason: str | None,
                  backend: str, completion_tokens: int | None) -> dict[str, Any]:
    assembled = assemble(content, reasoning)
    record: dict[str, Any] = {
        "id": prompt.id,
        "messages": [*prompt.messages, {"role": "assistant", "content": assembled.text}],
        "finish_reason": finish_reason, "reasoning": assembled.has_reasoning,
        "backend": backend, "completion_tokens": completion_tokens}
    if assembled.restored_open_tag:
        record["restored_open_tag"] = True
    return record


def run(args: argparse.Namespace) -> StageResult:
    result = StageResult(action=ACTION)
    prompts = load_prompts(Path(args.prompts), args.samples)
    out = Path(args.out)
    cfg = {"backend": args.backend, "max_new_tokens": args.max_new_tokens,
           "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed,
           "model": args.model if args.backend == "openai" else str(args.verifier)}
    tp_follower = args.backend == "local" and getattr(args, "tp_plan", None) and rank() != 0
    if tp_follower:  # tensor-parallel ranks other than 0 run the model and write nothing
        args.result = None
    else:
        guard_config(out, cfg, stage=ACTION)
    done = existing_ids(out, repair=not tp_follower)
    todo = [p for p in prompts if p.id not in done]
    log(f"[generate] {len(prompts)} prompts, {len(prompts) - len(todo)} already answered, "
        f"{len(todo)} to go ({args.backend})")

    if args.backend == "local":
        if args.verifier is None:
            raise ActionError("--verifier is required with --backend local")
        failures = _run_local(args, todo, out, writes=not tp_follower)
        if tp_follower:
            return result
    else:
        if not args.endpoint or not args.model:
            raise ActionError("--endpoint and --model are required with --backend openai")
        failures = _run_openai(args, todo, out)

    samples = [obj for _, obj in read_jsonl(out / SAMPLES)] if (out / SAMPLES).exists() else []
    wanted = {p.id for p in prompts}
    samples = [s for s in samples if s.get("id") in wanted]
    n = len(samples)
    with_reasoning = sum(bool(s.get("reasoning")) for s in samples)
    capture = with_reasoning / n if n else 0.0
    reasons = _verifier_reasons(args, with_reasoning)
    truncated = sum(s.get("finish_reason") == "length" for s in samples)
    result.metrics.update(prompts=len(prompts), samples=n, new_samples=n - len(done & wanted),
                          failed=failures, reasoning_capture=round(capture, 4),
                          verifier_reasons=reasons, truncated=truncated,
                          restored_open_tag=sum(bool(s.get("restored_open_tag"))
                                                for s in samples))
    result.artifacts.append(str(out / SAMPLES))
    result.check("all_answered", n == len(prompts) and failures == 0, value=n,
                 expected=len(prompts),
                 message=f"{failures} failed request(s) in {out / FAILED}" if failures else "")
    if reasons:
        result.check("reasoning_capture", capture >= args.min_reasoning_capture,
                     value=round(capture, 4), expected=f">= {args.min_reasoning_capture}",
                     message="share of samples whose reasoning was kept")
    result.summary = (f"generate: {n}/{len(prompts)} samples, reasoning capture "
                      f"{capture:.1%}, {truncated} truncated, {failures} failed")
    return result


def _verifier_reasons(args: argparse.Namespace, with_reasoning: int) -> bool:
    if args.expect_reasoning != "auto":
        return args.expect_reasoning == "yes"
    if args.verifier is not None and Path(args.verifier).is_dir():
        tok = load_tokenizer(Path(args.verifier))
        if THINK_OPEN in tok.get_vocab():
            return True
    return with_reasoning > 0


def _append(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        fh.flush()


def _run_local(args: argparse.Namespace, todo: list[Prompt], out: Path,
               writes: bool = True) -> int:
    import torch

    from pipeline.eagle3.hardware.memory_plan import Workload, load_placed

    use_threads(args)  # here, not for every backend: --backend openai needs no torch
    placement = placement_from_args(args, pick_device(args.device))
    tok = load_tokenizer(Path(args.verifier))
    tok.padding_side = "left"
    if not todo:
        return 0
    texts = [tok.apply_chat_template(p.messages, tokenize=False, add_generation_prompt=True)
             for p in todo]
    longest = max(len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"])
    total = longest + args.max_new_tokens
    work = Workload(batch=min(args.batch_size, len(todo)), seq=longest, kv_tokens=total,
                    logits_rows=1)
    placed = load_placed(Path(args.verifier), pick_dtype(args.dtype, placement.device),
                         placement, work, log if writes else (lambda _m: None))
    model, device = placed.model, placed.input_device
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    eos_ids = model.generation_config.eos_token_id
    eos_ids = {eos_ids} if isinstance(eos_ids, int) else set(eos_ids or [tok.eos_token_id])
    # Similar lengths share a batch, so left padding wastes little.
    order = sorted(range(len(todo)), key=lambda i: len(texts[i]))
    progress = Progress("generate", total=len(todo))
    for start in range(0, len(order), args.batch_size):
        idx = order[start:start + args.batch_size]
        enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True,
                  add_special_tokens=False).to(device)
        gen_kwargs: dict[str, Any] = {"max_new_tokens": args.max_new_tokens,
                                      "pad_token_id": pad_id, "eos_token_id": sorted(eos_ids)}
        if args.temperature > 0:
            torch.manual_seed(args.seed + start)
            gen_kwargs.update(do_sample=True, temperature=args.temperature, top_p=args.top_p)
        else:
            gen_kwargs.update(do_sample=False)
        with torch.no_grad():
            gen = model.generate(**enc, **gen_kwargs)
        new = gen[:, enc["input_ids"].shape[1]:].cpu()
        records, n_tokens = [], 0
        for row, i in zip(new.tolist(), idx, strict=True):
            stop = next((k for k, t in enumerate(row) if t in eos_ids), None)
            body = row[:stop] if stop is not None else [t for t in row if t != pad_id]
            n_tokens += len(body) + (stop is not None)
            records.append(sample_record(todo[i], tok.decode(body, skip_special_tokens=True),
                                         None, "stop" if stop is not None else "length",
                                         "local", len(body)))
        if writes:
            _append(out / SAMPLES, records)
        progress.update(len(idx), n_tokens, force=start + args.batch_size >= len(order))
    return 0


def _run_openai(args: argparse.Namespace, todo: list[Prompt], out: Path) -> int:
    from pipeline.eagle3.text.openai_backend import OpenAIBackend, RequestFailed

    backend = OpenAIBackend(endpoint=args.endpoint, model=args.model,
                            api_key=os.environ.get(args.api_key_env) or None,
                            timeout=args.request_timeout, retries=args.retries,
                            retry_delay=args.retry_delay)
    progress = Progress("generate", total=len(todo))
    failures = 0

    def one(prompt: Prompt):
        return backend.complete(prompt.messages, max_tokens=args.max_new_tokens,
                                temperature=args.temperature, top_p=args.top_p,
                                seed=args.seed)

    with ThreadPoolExecutor(max_workers=max(1, args.concurrency)) as pool:
        futures = {pool.submit(one, p): p for p in todo}
        for fut in as_completed(futures):
            prompt = futures[fut]
            try:
                c = fut.result()
            except RequestFailed as exc:
                failures += 1
                _append(out / FAILED, [{"id": prompt.id, "error": str(exc)}])
                progress.update(0, extra=f"failed {prompt.id}: {exc}")
                continue
            _append(out / SAMPLES, [sample_record(prompt, c.content, c.reasoning,
                                                  c.finish_reason, "openai",
                                                  c.completion_tokens)])
            progress.update(1, c.completion_tokens or 0)
    log(progress.line(f"{failures} failed"))
    return failures


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
