"""Held-out prompts for the functional checks, as token ids through the verifier's template.

``--data`` is one of:

- a JSONL file of prompts in any shape ``eagle3.generate`` reads (``messages``, ``prompt``,
  ``conversations``); samples that already end with an assistant answer (generate's or
  clean's output) are accepted too, the answer dropped;
- tokenize's output (a directory with ``tokens.safetensors``, or the file): each sample's
  prompt is its tokens before the first loss-masked one.

``--exclude`` names a JSONL file of samples the drafter was trained on (generate's or
clean's ``samples.jsonl``): prompts with one of its ids, or the same user text, are
skipped, so "held out" means held out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.eagle3.common import read_jsonl
from pipeline.eagle3.text.chat import parse_prompt
from pipeline.errors import ActionError


@dataclass
class HeldOutPrompt:
    id: str
    ids: list[int]


def user_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(" ".join(str(m.get("content", "")).split()) for m in messages
                     if isinstance(m, dict) and m.get("role") in ("user", "human"))


def _strip_answer(obj: Any) -> Any:
    if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
        msgs = list(obj["messages"])
        while msgs and isinstance(msgs[-1], dict) and msgs[-1].get("role") == "assistant":
            msgs.pop()
        return {**obj, "messages": msgs}
    return obj


def excluded(path: Path | None) -> tuple[set[str], set[str]]:
    """(ids, normalised user texts) of the samples in ``path``."""
    if path is None:
        return set(), set()
    ids, texts = set(), set()
    for _lineno, obj in read_jsonl(Path(path)):
        if not isinstance(obj, dict):
            continue
        if obj.get("id") is not None:
            ids.add(str(obj["id"]))
        if isinstance(obj.get("messages"), list):
            texts.add(user_text(obj["messages"]))
        elif isinstance(obj.get("prompt"), str):
            texts.add(" ".join(obj["prompt"].split()))
    return ids, texts


def load_heldout(data: Path, tokenizer: Any, *, samples: int, exclude: Path | None = None,
                 max_prompt_tokens: int = 1024) -> tuple[list[HeldOutPrompt], dict[str, int]]:
    """Up to ``samples`` prompts as token ids, and counts of what was skipped and why."""
    data = Path(data)
    if not data.exists():
        raise ActionError("held-out data not found", where=str(data))
    skip_ids, skip_texts = excluded(exclude)
    counts = {"read": 0, "excluded": 0, "too_long": 0}
    out: list[HeldOutPrompt] = []
    if data.is_dir() or data.suffix == ".safetensors":
        from pipeline.eagle3.text.datafiles import read_tokens

        tok = read_tokens(data)
        offsets, input_ids, mask = tok["offsets"], tok["input_ids"], tok["loss_mask"]
        for i, sid in enumerate(tok["ids"]):
            counts["read"] += 1
            if str(sid) in skip_ids:
                counts["excluded"] += 1
                continue
            a, b = int(offsets[i]), int(offsets[i + 1])
            masked = mask[a:b].nonzero()
            cut = int(masked[0]) if masked.numel() else b - a
            if cut == 0 or cut > max_prompt_tokens:
                counts["too_long"] += 1
                continue
            out.append(HeldOutPrompt(str(sid), [int(x) for x in input_ids[a:a + cut]]))
            if len(out) >= samples:
                break
    else:
        seen: set[str] = set()
        for lineno, obj in read_jsonl(data):
            counts["read"] += 1
            prompt = parse_prompt(_strip_answer(obj), where=f"{data}:{lineno}")
            text = user_text(prompt.messages)
            if prompt.id in skip_ids or text in skip_texts or text in seen:
                counts["excluded"] += 1
                continue
            seen.add(text)
            ids = tokenizer.apply_chat_template(prompt.messages, tokenize=True,
                                                add_generation_prompt=True)
            if not isinstance(ids, list):  # a BatchEncoding in some transformers releases
                ids = list(ids["input_ids"])
            if len(ids) > max_prompt_tokens:
                counts["too_long"] += 1
                continue
            out.append(HeldOutPrompt(prompt.id, [int(x) for x in ids]))
            if len(out) >= samples:
                break
    if not out:
        raise ActionError(f"no held-out prompt left ({counts['read']} read, "
                          f"{counts['excluded']} excluded as training data, "
                          f"{counts['too_long']} too long)", where=str(data),
                          hint="give prompts the drafter was not trained on")
    return out, counts
