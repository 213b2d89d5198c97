"""P-EAGLE (parallel drafting): the facts vLLM 0.26.0 fixes, and the mask token's choice.

A P-EAGLE drafter is an EAGLE-3 drafter (the same one decoder layer, ``fc``, norms, head
and vocab mapping) trained to draft all ``k`` tokens of a round in **one** forward.
vLLM 0.26.0 serves it with ``--speculative-config '{"method": "eagle3", "model": DIR,
"num_speculative_tokens": k, "parallel_drafting": true}'`` from a speculators config of
type ``peagle`` (``transformers_utils/configs/speculators/algos.py``: ``update_peagle``
maps it to ``PeagleLlamaForCausalLM``, which the registry resolves to
``Eagle3LlamaForCausalLM``; ``mask_token_id`` is required and becomes ``pard_token``;
``norm_before_residual`` defaults to false there, unlike eagle3's true). What the proposer
feeds the drafter in that forward (``v1/spec_decode/llm_base_proposer.py``,
``copy_and_expand_eagle_inputs_kernel`` in ``v1/spec_decode/utils.py``):

- the verified rows as in EAGLE-3: row ``i`` reads token ``x_{i+1}`` and
  ``fc(aux_i)`` at position ``i``; the last one (the bonus token's row) gives draft 1;
- then ``k - 1`` rows at the next positions, each reading the mask token
  (``pard_token``) and ``fc(mask_hidden)``: ``mask_hidden`` is a learned ``[3Ht]``
  vector shipped in the checkpoint (the loader refuses a parallel-drafting drafter
  without it) and projected once at load (``combine_hidden_states``); row ``m`` gives
  draft ``m + 1``;
- causal attention over all of them, so mask row ``m`` sees every verified row and the
  mask rows before it; the logits go through ``d2t`` as in EAGLE-3.

Training (:meth:`pipeline.eagle3.model.drafter.Eagle3Drafter.ttt_forward` with ``config.parallel``) builds
exactly those rows for every position of a sequence at once; verification's reference
loop (:func:`pipeline.eagle3.model.specdecode.speculative_decode`) drafts a round in one forward the same way.

The mask token is embedded with the verifier's embeddings (frozen in training, and shared
from the target by vLLM, since the export carries none): :func:`choose_mask_token` takes
the verifier's special token that the drafter reads least in the training data (ties: the
highest id, where reserved tokens sit), so a mask row's token input is one that real rows
(almost) never have.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import ActionError

if TYPE_CHECKING:  # torch is imported where counts are made: train's parser stays light
    import torch

METHODS = ("eagle3", "peagle")


def special_tokens(verifier: Path, vocab_size: int) -> dict[int, str]:
    """``id -> text`` of the verifier tokenizer's special tokens inside its embedding table,
    read from ``tokenizer.json`` (``added_tokens``) and ``tokenizer_config.json``
    (``added_tokens_decoder``) without loading the tokenizer."""
    found: dict[int, str] = {}
    tok = Path(verifier) / "tokenizer.json"
    cfg = Path(verifier) / "tokenizer_config.json"
    try:
        if tok.is_file():
            for entry in json.loads(tok.read_text()).get("added_tokens") or []:
                if entry.get("special"):
                    found[int(entry["id"])] = str(entry.get("content", ""))
        if cfg.is_file():
            decoder = json.loads(cfg.read_text()).get("added_tokens_decoder") or {}
            for key, entry in decoder.items():
                if isinstance(entry, dict) and entry.get("special"):
                    found.setdefault(int(key), str(entry.get("content", "")))
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise ActionError(f"cannot read the tokenizer's special tokens ({exc})",
                          where=str(verifier)) from None
    return {i: t for i, t in sorted(found.items()) if 0 <= i < vocab_size}


def drafter_input_counts(input_ids: torch.Tensor, offsets: torch.Tensor,
                         vocab_size: int) -> torch.Tensor:
    """How often each token is a drafter row's input: every token but each sample's first
    (row ``i`` reads ``x_{i+1}``)."""
    import torch

    ids = input_ids.long()
    counts = torch.bincount(ids, minlength=vocab_size)[:vocab_size]
    firsts = ids[offsets[:-1].long()[offsets[:-1].long() < ids.numel()]]
    return counts - torch.bincount(firsts, minlength=vocab_size)[:vocab_size]


def choose_mask_token(counts: torch.Tensor, specials: dict[int, str]
                      ) -> tuple[int, str]:
    """``(id, why)``: the special token read least as a drafter input (the highest id on a
    tie); without special tokens, the least read token of the whole vocabulary."""
    pool = list(specials) or list(range(counts.numel()))
    best = min(pool, key=lambda i: (int(counts[i]), -i))
    total = int(counts.sum())
    name = f"{specials[best]!r} " if best in specials else ""
    among = "the verifier's special tokens" if specials else \
        "the vocabulary (the tokenizer declares no special token)"
    return best, (f"{name}(id {best}): of {among}, the one the drafter reads least in the "
                  f"training data ({int(counts[best])} of {total} inputs), highest id on a "
                  "tie; embedded with the verifier's frozen embeddings, as vLLM will")


def resolve_mask_token(requested: int | None, vocab_size: int, verifier: Path,
                       counts: Any) -> tuple[int, str]:
    """The mask token ``train --method peagle`` uses: ``--mask-token-id`` when given
    (checked against the vocabulary), else :func:`choose_mask_token` over ``counts()``."""
    if requested is not None:
        if not 0 <= requested < vocab_size:
            raise ActionError(f"--mask-token-id {requested} is not a token of the verifier "
                              f"(0..{vocab_size - 1})")
        return requested, f"id {requested}: given by --mask-token-id"
    return choose_mask_token(counts(), special_tokens(verifier, vocab_size))
