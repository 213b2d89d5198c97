"""Action ``eagle3.build_verifier``: build a tiny reasoning verifier without any download.

For examples and tests only. It trains a byte-level BPE tokenizer on the standard library's
source, with chat tokens (``<|im_start|>``, ``<|im_end|>``) and ``<think>``/``</think>``, and a
chat template that renders an assistant turn's ``reasoning_content`` as ``<think>`` ...
``</think>`` before its content. It then trains a small ``LlamaForCausalLM`` on synthetic
chats (:mod:`pipeline.eagle3.text.synthetic`) in which the assistant reasons in a think block and then answers,
and saves a normal Hugging Face directory. ``--arch`` picks the architecture: ``llama``
(default), ``qwen3`` (q/k norms, an explicit head dim), or ``deepseek_v3``, the seed
campaign's (Kimi-K2's): MLA attention with LoRA-ranked q and kv, a first dense layer, then
routed experts plus a shared one. Deterministic for a seed (on one interpreter: the
tokenizer corpus is that interpreter's standard library).

Checks: the directory loads with ``AutoModelForCausalLM``/``AutoTokenizer``, and greedy
answers to held-out prompts open and close a think block (``reasoning_rate``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.actions import StageResult, add_bool_arg, make_parser, run_action
from pipeline.eagle3.common import (
    Progress,
    add_threads_arg,
    atomic_write_text,
    log,
    pick_device,
    use_threads,
)
from pipeline.eagle3.text import synthetic
from pipeline.eagle3.text.chat import THINK_CLOSE, THINK_OPEN, think_problem
from pipeline.errors import ActionError

ACTION = "eagle3.build_verifier"
ARCHS = ("llama", "qwen3", "deepseek_v3")

IM_START, IM_END, EOT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"

# Jinja, as Hugging Face renders it. `{% generation %}` marks the assistant's tokens so that
# `return_assistant_tokens_mask=True` works; reasoning given apart is put back in a think block.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' -%}"
    "{% generation %}"
    "{%- if message.reasoning_content is defined and message.reasoning_content -%}"
    "{{ '<think>' + message.reasoning_content + '</think>' }}"
    "{%- endif -%}"
    "{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}"
    "{{ '\\n' }}"
    "{%- else -%}"
    "{{ message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, __doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="Hugging Face directory to write")
    p.add_argument("--prompts-out", type=Path, default=None,
                   help="also write this many held-out prompts here (JSONL, 'messages' shape)")
    p.add_argument("--prompts", type=int, default=256, help="number of prompts for --prompts-out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--corpus-files", type=int, default=60,
                   help="standard-library files the tokenizer is trained on")
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--layers", type=int, default=7)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate-size", type=int, default=384)
    p.add_argument("--arch", choices=ARCHS, default="llama",
                   help="llama, qwen3, or deepseek_v3 (MLA + routed experts, as Kimi-K2)")
    p.add_argument("--experts", type=int, default=4, help="deepseek_v3: routed experts")
    p.add_argument("--experts-per-token", type=int, default=2, help="deepseek_v3: top-k")
    p.add_argument("--train-samples", type=int, default=6000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--check-prompts", type=int, default=16,
                   help="held-out prompts answered greedily to measure reasoning_rate (0: "
                        "no reasoning check)")
    p.add_argument("--min-reasoning-rate", type=float, default=0.9)
    p.add_argument("--device", default="cpu")
    # What a GPU needs to train billions of parameters in minutes; a CPU run is unchanged.
    p.add_argument("--autocast", choices=("auto", "bf16", "off"), default="auto",
                   help="bf16 autocast of the forward (auto: on CUDA, off on the CPU); the "
                        "weights and Adam state stay fp32")
    add_bool_arg(p, "fused-adamw", True, "fused AdamW on CUDA (the CPU keeps the default "
                                         "implementation)")
    add_bool_arg(p, "compile", False, "torch.compile the model (dynamic shapes)")
    add_bool_arg(p, "grad-checkpointing", False,
                 "recompute each layer's activations in the backward: less memory, about a "
                 "third more compute")
    p.add_argument("--micro-batch", type=int, default=None,
                   help="rows per forward; a step accumulates --batch-size rows in pieces of "
                        "this size (default: the whole batch at once)")
    p.add_argument("--save-dtype", choices=("float32", "bfloat16"), default="float32",
                   help="dtype of the saved weights (bfloat16 halves the disk and load of a "
                        "large verifier)")
    add_bool_arg(p, "threads-one", False, "use one intra-op thread (bit-stable across machines)")
    add_threads_arg(p)
    return p


def train_tokenizer(files: list[Path], vocab_size: int):
    """Byte-level BPE on ``files``; chat tokens are special, think tags are plain added tokens
    so that decoding keeps them in the text (a parser then finds them, as on a real server)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[EOT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(f) for f in files], trainer)
    tok.add_tokens([AddedToken(THINK_OPEN, normalized=False, special=False),
                    AddedToken(THINK_CLOSE, normalized=False, special=False)])
    return tok


def wrap_tokenizer(tok):
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=IM_END,
                                 pad_token=EOT, unk_token=None)
    hf.chat_template = CHAT_TEMPLATE
    return hf


def chat_text(question: str, reasoning: str, answer: str) -> tuple[str, str]:
    """(prompt part, assistant part) exactly as the chat template renders them."""
    prompt = f"{IM_START}user\n{question}{IM_END}\n{IM_START}assistant\n"
    return prompt, f"{THINK_OPEN}{reasoning}{THINK_CLOSE}{answer}{IM_END}"


def run(args: argparse.Namespace) -> StageResult:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = StageResult(action=ACTION)
    if args.threads_one:
        torch.set_num_threads(1)
    device = pick_device(args.device)
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    files = synthetic.stdlib_files(args.corpus_files)
    tok = train_tokenizer(files, args.vocab_size)
    hf_tok = wrap_tokenizer(tok)
    words = synthetic.stdlib_words(files)
    log(f"[verifier] tokenizer: {len(hf_tok)} tokens from {len(files)} stdlib files, "
        f"{len(words)} task words")

    vocab = len(hf_tok)
    config = build_config(args, vocab, bos=hf_tok.convert_tokens_to_ids(EOT),
                          eos=hf_tok.convert_tokens_to_ids(IM_END))
    if device.type == "cuda":
        # built where it trains: billions of fp32 parameters are not made on the CPU first
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config)
    else:
        model = AutoModelForCausalLM.from_config(config).to(device)

    tasks = synthetic.make_tasks(args.train_samples, args.seed, words)
    rows = []
    for q, r, a in tasks:
        prompt, answer = chat_text(q, r, a)
        p_ids = hf_tok(prompt, add_special_tokens=False)["input_ids"]
        a_ids = hf_tok(answer, add_special_tokens=False)["input_ids"]
        rows.append((p_ids, a_ids))

    if args.micro_batch is not None and not 0 < args.micro_batch <= args.batch_size:
        raise ActionError(f"--micro-batch {args.micro_batch} must be between 1 and "
                          f"--batch-size {args.batch_size}")
    stats = _train(model, rows, args, device, pad_id=config.pad_token_id)
    losses = stats.losses
    result.metrics.update(final_loss=round(losses[-1], 4), first_loss=round(losses[0], 4),
                          params=sum(p.numel() for p in model.parameters()),
                          vocab_size=vocab, layers=args.layers, hidden_size=args.hidden_size,
                          heads=args.heads, kv_heads=args.kv_heads,
                          intermediate_size=args.intermediate_size,
                          arch=args.arch, architecture=type(model).__name__)
    result.metrics.update(_throughput(stats, model, device))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    if args.save_dtype == "bfloat16":
        model.to(torch.bfloat16)
    model.save_pretrained(str(out))
    hf_tok.save_pretrained(str(out))
    _portable_tokenizer_class(out / "tokenizer_config.json")
    result.artifacts.append(str(out))

    # Functional checks on what was written, through the public loaders; on a GPU, there
    # (the trained copy goes first: the GPU holds one model at a time).
    if device.type == "cuda":
        del model
        torch.cuda.empty_cache()
        reloaded = AutoModelForCausalLM.from_pretrained(str(out)).to(device).eval()
    else:
        reloaded = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    reloaded_tok = AutoTokenizer.from_pretrained(str(out))
    result.check("loads", True, message="AutoModelForCausalLM and AutoTokenizer load the dir")
    rate = None
    if args.check_prompts > 0:  # 0: no reasoning check (fixtures that only need a model)
        held_out = synthetic.make_tasks(args.check_prompts, args.seed + 7919, words)
        rate, example = _reasoning_rate(reloaded, reloaded_tok, held_out)
        result.metrics["reasoning_rate"] = rate
        result.metrics["example_answer"] = example
        result.check("reasoning_rate", rate >= args.min_reasoning_rate, value=rate,
                     expected=f">= {args.min_reasoning_rate}",
                     message="share of greedy answers with a balanced think block")

    if args.prompts_out:
        prompts = synthetic.make_tasks(args.prompts, args.seed + 104729, words)
        lines = [json.dumps({"id": f"q{i:05d}", "messages": [{"role": "user", "content": q}]})
                 for i, (q, _, _) in enumerate(prompts)]
        atomic_write_text(Path(args.prompts_out), "\n".join(lines) + "\n")
        result.artifacts.append(str(args.prompts_out))
    m = result.metrics
    mfu = f", MFU {m['mfu']:.1%} of {m['gpu']}" if m.get("mfu") is not None else ""
    result.summary = (f"verifier: {m['architecture']}, {m['params']:,} params (hidden "
                      f"{args.hidden_size}, {args.layers} layers, {args.heads} heads / "
                      f"{args.kv_heads} KV, MLP {args.intermediate_size}, vocab {vocab}), "
                      f"trained on {m['train_tokens']:,} tokens in {m['train_seconds']:.0f} s"
                      f"{mfu}, loss {m['first_loss']} -> {m['final_loss']}"
                      + (f", reasoning_rate {rate:.2f}" if rate is not None else ""))
    return result


def build_config(args: argparse.Namespace, vocab: int, *, bos: int, eos: int):
    """The verifier's config for ``--arch`` at the sizes given."""
    from transformers import DeepseekV3Config, LlamaConfig, Qwen3Config

    h, heads = args.hidden_size, args.heads
    common = dict(vocab_size=vocab, hidden_size=h, intermediate_size=args.intermediate_size,
                  num_hidden_layers=args.layers, num_attention_heads=heads,
                  max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=bos,
                  eos_token_id=eos, pad_token_id=bos, tie_word_embeddings=False)
    if args.arch == "llama":
        return LlamaConfig(**common, num_key_value_heads=args.kv_heads)
    if args.arch == "qwen3":
        # Qwen3's head dim is its own (128 at every size), not hidden / heads.
        return Qwen3Config(**common, num_key_value_heads=args.kv_heads,
                           head_dim=max(8, 2 * h // heads))
    if args.experts_per_token > args.experts:
        raise ActionError(f"--experts-per-token {args.experts_per_token} exceeds --experts "
                          f"{args.experts}")
    # Kimi-K2's proportions at a small size: q rank ~ 0.2 H, kv rank ~ 0.07 H (here a
    # little wider, so tiny models keep a usable rank), rope part half the nope part.
    head = h // heads
    return DeepseekV3Config(
        **common, num_key_value_heads=heads, q_lora_rank=max(8, h // 2),
        kv_lora_rank=max(8, h // 4), qk_nope_head_dim=head, qk_rope_head_dim=max(4, head // 2),
        v_head_dim=head, n_routed_experts=args.experts,
        num_experts_per_tok=args.experts_per_token, n_shared_experts=1,
        moe_intermediate_size=max(8, args.intermediate_size // 4), first_k_dense_replace=1,
        n_group=1, topk_group=1, num_nextn_predict_layers=0,
        # The router transformers implements (sigmoid scores, a correction bias), named as
        # DeepSeek-V3 and Kimi-K2 ship it: without these keys vLLM routes with softmax and
        # no bias, another model.
        topk_method="noaux_tc", scoring_func="sigmoid")


def _portable_tokenizer_class(path: Path) -> None:
    # transformers 5 writes its new backend's class name, which 4.x cannot resolve; the
    # classic name loads the same tokenizer.json on both.
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    atomic_write_text(path, json.dumps(cfg, indent=2) + "\n")


@dataclass
class TrainStats:
    losses: list[float]
    seconds: float      # the training loop's wall time (compiles and first steps included)
    tokens: int         # the real tokens trained on (padding left out)
    positions: int      # the positions the model computed: tokens plus padding


def _batch(chunk: list[tuple[list[int], list[int]]], pad_id: int):
    """(ids, attention mask, labels) of ``chunk``, padded to its longest row."""
    import torch

    width = max(len(p) + len(a) for p, a in chunk)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    attn = torch.zeros_like(ids)
    for r, (p, a) in enumerate(chunk):
        seq = p + a
        ids[r, : len(seq)] = torch.tensor(seq)
        labels[r, len(p): len(seq)] = torch.tensor(a)  # learn the assistant turn only
        attn[r, : len(seq)] = 1
    return ids, attn, labels


def _optimizer(model, args, device):
    import torch

    # Fused AdamW: one kernel for every parameter instead of several per tensor, on CUDA;
    # the CPU keeps the implementation its results were measured with.
    fused = bool(args.fused_adamw and device.type == "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.0, **({"fused": True} if fused else {}))
    return opt, fused


def _train(model, rows, args, device, pad_id: int) -> TrainStats:
    import contextlib

    import torch

    opt, fused = _optimizer(model, args, device)
    warmup = max(1, args.steps // 10)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, args.steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    use_amp = args.autocast == "bf16" or (args.autocast == "auto" and device.type == "cuda")
    if args.grad_checkpointing:
        _checkpointing(model, True)
    forward = torch.compile(model, dynamic=True) if args.compile else model
    micro = args.micro_batch or args.batch_size
    log(f"[verifier] training: {args.steps} steps of {args.batch_size} rows"
        + (f" in pieces of {micro}" if micro < args.batch_size else "")
        + f" on {device}; autocast {'bf16' if use_amp else 'off'}, "
        f"AdamW{' fused' if fused else ''}{', compiled' if args.compile else ''}"
        f"{', gradient checkpointing' if args.grad_checkpointing else ''}")
    gen = torch.Generator().manual_seed(args.seed)
    progress = Progress("verifier", total=args.steps, every=10, unit="steps")
    losses: list[float] = []
    tokens = positions = 0
    model.train()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for step in range(args.steps):
        idx = torch.randint(len(rows), (args.batch_size,), generator=gen).tolist()
        batch = [rows[i] for i in idx]
        # the loss of the whole batch is the mean over its assistant tokens: each piece's
        # mean weighs by its share of them (one piece: a weight of exactly 1)
        total = sum(len(a) for _, a in batch)
        loss_sum = 0.0
        step_tokens = 0
        for at in range(0, len(batch), micro):
            ids, attn, labels = _batch(batch[at: at + micro], pad_id)
            share = sum(len(a) for _, a in batch[at: at + micro]) / total
            amp = (torch.autocast(device_type=device.type, dtype=torch.bfloat16)
                   if use_amp else contextlib.nullcontext())
            with amp:
                out = forward(input_ids=ids.to(device), attention_mask=attn.to(device),
                              labels=labels.to(device), use_cache=False)
            loss = out.loss if share == 1 else out.loss * share
            loss.backward()
            loss_sum += loss.item()
            step_tokens += int(attn.sum())
            positions += ids.numel()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss_sum)
        tokens += step_tokens
        progress.update(1, step_tokens, extra=f"loss {losses[-1]:.3f}",
                        force=step == args.steps - 1)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    if args.grad_checkpointing:
        _checkpointing(model, False)
    model.eval()
    return TrainStats(losses, seconds, tokens, positions)


def _checkpointing(model, on: bool) -> None:
    # transformers 5.2x names it activation checkpointing; earlier releases, gradient
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        if on:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.activation_checkpointing_disable()
    elif on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_disable()


def _throughput(stats: TrainStats, model, device) -> dict[str, object]:
    """Tokens a second and MFU: 6 x the parameters a token multiplies with (all but the
    input embedding, a lookup) x the positions computed, over the GPU's bf16 peak
    (:mod:`pipeline.eagle3.hardware.gpu_peaks`). Attention's own FLOPs are left out, as
    the 6N count does; with gradient checkpointing the GPU does a third more than this.
    No MFU on the CPU or on a GPU the table does not know."""
    import torch

    from pipeline.eagle3.hardware.gpu_peaks import gpu_peak, mfu
    from pipeline.eagle3.hardware.memory_plan import measured_peaks

    matmul = sum(p.numel() for p in model.parameters()) - \
        model.get_input_embeddings().weight.numel()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = gpu_peak(name)
    flops = 6 * matmul * stats.positions
    got = mfu(flops, stats.seconds, peak)
    out: dict[str, object] = {
        "train_seconds": round(stats.seconds, 2), "train_tokens": stats.tokens,
        "train_positions": stats.positions,
        "train_tokens_per_s": round(stats.tokens / max(stats.seconds, 1e-9), 1),
        "train_tflops": round(flops / max(stats.seconds, 1e-9) / 1e12, 3),
        "mfu": round(got, 4) if got is not None else None, "gpu": name,
        "peak_bf16_tflops": peak.bf16_tflops if peak else None}
    peaks = measured_peaks() if device.type == "cuda" else {}
    if peaks:
        out["device_peak_gib"] = peaks
    return out


def _reasoning_rate(model, tok, tasks) -> tuple[float, str]:
    import torch

    ok = 0
    example = ""
    tok.padding_side = "left"
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                       add_generation_prompt=True) for q, _, _ in tasks]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(
        model.device)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=96, do_sample=False,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    for row in out[:, enc["input_ids"].shape[1]:]:
        text = tok.decode(row, skip_special_tokens=True)
        example = example or text
        if THINK_OPEN in text and THINK_CLOSE in text and think_problem(text) is None:
            ok += 1
    return ok / max(1, len(tasks)), example


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv, setup=use_threads)


if __name__ == "__main__":
    raise SystemExit(main())
