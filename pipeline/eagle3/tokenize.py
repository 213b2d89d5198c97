"""Action ``eagle3.tokenize``: samples -> token ids, loss mask, token frequencies.

Input: clean's ``samples.jsonl`` and the verifier directory (its tokenizer and chat template).
Output in ``OUT``: ``tokens.safetensors`` + ``index.jsonl`` and ``freqs.safetensors``
(:mod:`pipeline.eagle3.text.datafiles` describes them).

Modes:

- ``chat``: the verifier's chat template renders the messages. The loss mask covers the
  assistant turns: through the template's ``{% generation %}`` markers when it has them,
  else by finding each assistant message's text in the rendering (plus the one special token
  that ends the turn). An assistant turn the template does not render (some drop earlier
  turns' reasoning) is left unmasked and counted.
- ``completion``: ``{"prompt", "completion"}`` samples (or the user/assistant contents of a
  chat sample) are joined as plain text; the mask covers the completion.

Checks: every kept sample has masked tokens; the token ids fit the verifier's vocab.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.actions import StageResult, add_bool_arg, make_parser, run_action
from pipeline.eagle3.common import (
    Progress,
    add_threads_arg,
    guard_config,
    load_tokenizer,
    log,
    read_jsonl,
    resolve_jsonl,
    use_threads,
    verifier_config,
)
from pipeline.eagle3.text.datafiles import write_freqs, write_tokens
from pipeline.errors import ActionError

ACTION = "eagle3.tokenize"


def build_parser() -> argparse.ArgumentParser:
    p = make_parser(ACTION, "Samples -> token ids, loss mask over assistant tokens, frequencies.")
    p.add_argument("--samples", type=Path, required=True, help="samples JSONL or its directory")
    p.add_argument("--verifier", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--mode", choices=("chat", "completion"), default="chat")
    p.add_argument("--max-length", type=int, default=4096, help="tokens kept per sample")
    add_bool_arg(p, "add-eos", True, "completion mode: end each sample with the EOS token")
    add_threads_arg(p)
    return p


class Masker:
    """Token ids and an assistant mask for one chat sample, through the verifier's template."""

    def __init__(self, tok: Any):
        self.tok = tok
        template = tok.chat_template or ""
        if not template:
            raise ActionError("the verifier's tokenizer has no chat template",
                              hint="use --mode completion")
        self.use_generation_tags = "{% generation %}" in template.replace("{%- generation",
                                                                          "{% generation")
        self.special = set(tok.all_special_ids)
        self.missing_turns = 0

    def __call__(self, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
        if self.use_generation_tags:
            out = self.tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                               return_assistant_tokens_mask=True)
            return list(out["input_ids"]), [int(m) for m in out["assistant_masks"]]
        text = self.tok.apply_chat_template(messages, tokenize=False)
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, spans = enc["input_ids"], enc["offset_mapping"]
        mask = [0] * len(ids)
        cursor = 0
        for m in messages:
            if m["role"] != "assistant" or not m["content"]:
                continue
            start = text.find(m["content"], cursor)
            if start < 0:
                self.missing_turns += 1
                continue
            end = start + len(m["content"])
            cursor = end
            last = -1
            for i, (a, b) in enumerate(spans):
                if b > start and a < end:
                    mask[i] = 1
                    last = i
            # The end-of-turn token is what stops generation: the drafter must predict it.
            if 0 <= last + 1 < len(ids) and ids[last + 1] in self.special:
                mask[last + 1] = 1
        return ids, mask


def completion_ids(tok: Any, sample: dict[str, Any], add_eos: bool,
                   where: str) -> tuple[list[int], list[int]]:
    if "prompt" in sample and "completion" in sample:
        prompt, completion = str(sample["prompt"]), str(sample["completion"])
    elif isinstance(sample.get("messages"), list) and sample["messages"]:
        msgs = sample["messages"]
        prompt = "".join(m["content"] for m in msgs[:-1])
        completion = msgs[-1]["content"]
    else:
        raise ActionError("completion mode needs 'prompt'+'completion' or 'messages'",
                          where=where)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    c_ids = tok(completion, add_special_tokens=False)["input_ids"]
    if add_eos and tok.eos_token_id is not None:
        c_ids = [*c_ids, tok.eos_token_id]
    return p_ids + c_ids, [0] * len(p_ids) + [1] * len(c_ids)


def run(args: argparse.Namespace) -> StageResult:
    import torch

    result = StageResult(action=ACTION)
    src = resolve_jsonl(Path(args.samples), "samples.jsonl")
    vocab_size = int(verifier_config(Path(args.verifier))["vocab_size"])
    tok = load_tokenizer(Path(args.verifier))
    out = Path(args.out)
    guard_config(out, {"verifier": str(args.verifier), "mode": args.mode,
                       "max_length": args.max_length, "add_eos": args.add_eos,
                       "samples": str(src)}, stage=ACTION)
    masker = Masker(tok) if args.mode == "chat" else None
    ids_out: list[str] = []
    all_ids: list[list[int]] = []
    all_mask: list[list[int]] = []
    truncated = no_mask = 0
    progress = Progress("tokenize")
    for lineno, sample in read_jsonl(src):
        where = f"{src}:{lineno}"
        if not isinstance(sample, dict):
            raise ActionError("a sample must be a JSON object", where=where)
        if masker is not None:
            if not isinstance(sample.get("messages"), list):
                raise ActionError("chat mode needs a 'messages' list", where=where)
            ids, mask = masker(sample["messages"])
        else:
            ids, mask = completion_ids(tok, sample, args.add_eos, where)
        if len(ids) > args.max_length:
            ids, mask = ids[: args.max_length], mask[: args.max_length]
            truncated += 1
        if not any(mask):
            no_mask += 1
            continue
        ids_out.append(str(sample.get("id", lineno)))
        all_ids.append(ids)
        all_mask.append(mask)
        progress.update(1, len(ids))
    if not all_ids:
        raise ActionError("no sample has assistant tokens to learn", where=str(src))
    lengths = torch.tensor([len(x) for x in all_ids])
    offsets = torch.zeros(len(all_ids) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    flat = torch.tensor([t for row in all_ids for t in row], dtype=torch.int64)
    mask = torch.tensor([m for row in all_mask for m in row], dtype=torch.uint8)
    max_id = int(flat.max())
    if max_id >= vocab_size:
        raise ActionError(f"token id {max_id} >= the verifier's vocab_size {vocab_size}",
                          where=str(Path(args.verifier) / "config.json"))
    counts = torch.bincount(flat[mask.bool()], minlength=vocab_size).to(torch.int64)
    path = write_tokens(out, ids_out, flat.to(torch.int32), mask, offsets, vocab_size)
    fpath = write_freqs(out, counts)
    masked = int(mask.sum())
    result.metrics.update(samples=len(all_ids), tokens=int(flat.numel()), masked_tokens=masked,
                          masked_share=round(masked / flat.numel(), 4), truncated=truncated,
                          dropped_no_assistant_tokens=no_mask,
                          distinct_masked_tokens=int((counts > 0).sum()),
                          mean_length=round(float(lengths.float().mean()), 1),
                          max_length=int(lengths.max()),
                          mask_method=("generation_tags" if masker and
                                       masker.use_generation_tags else
                                       "text_search" if masker else "completion"),
                          assistant_turns_not_rendered=masker.missing_turns if masker else 0)
    result.artifacts += [str(path), str(fpath)]
    result.check("assistant_tokens", masked > 0 and no_mask == 0, value=no_mask, expected=0,
                 message="samples without any assistant token (dropped)")
    log(progress.line())
    result.summary = (f"tokenize: {len(all_ids)} samples, {flat.numel()} tokens, "
                      f"{masked} loss-masked ({masked / flat.numel():.0%})")
    return result


def main(argv: list[str] | None = None) -> int:
    return run_action(ACTION, run, build_parser(), argv, setup=use_threads)


if __name__ == "__main__":
    raise SystemExit(main())
