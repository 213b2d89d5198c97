"""The prompts a served benchmark sends, and the request bodies made from them.

Prompt files are JSONL: ``{"id", "messages": [...]}`` (chat) or ``{"id", "prompt": "..."}``
(completion). ``exclude`` (generate's or clean's ``samples.jsonl``) and ``samples`` pick the
held-out prompts the way ``eagle3.verify`` does (:mod:`pipeline.eagle3.text.heldout`): a prompt
whose id or user text is a training sample's is skipped, repeats too, and the first
``samples`` are kept, so served and offline τ are measured on the same prompts. For the
completions endpoint, chat prompts go through the verifier's chat template (``tokenizer``:
the verifier directory; transformers is imported only then), with ``enable_thinking`` set
from ``reasoning``; for the chat endpoint the server applies it, and ``reasoning`` travels
as ``chat_template_kwargs``.

Standard library only, unless a chat template must be applied here.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.eagle3.text.heldout import excluded, user_text
from pipeline.errors import ActionError

__all__ = ["Prompt", "load_prompts", "request_bodies"]


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
            # the held-out selection of pipeline.eagle3.text.heldout.load_heldout
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


def request_bodies(prompts: list[Prompt], args: argparse.Namespace,
                   model: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, body) per prompt, in order. ``output_len`` fixes every answer's length
    (``max_tokens`` with ``ignore_eos``); otherwise answers end where the model ends them,
    at most ``max_tokens``."""
    fixed = getattr(args, "output_len", None)
    common: dict[str, Any] = {"model": model, "max_tokens": fixed or args.max_tokens,
                              "temperature": args.temperature}
    if args.ignore_eos or fixed:
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
