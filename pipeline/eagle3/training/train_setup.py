"""What ``eagle3.train`` builds before its first step: the data source (shards, or the
verifier online) and the drafter (fresh from the verifier and the vocab mapping, or a warm
start), for either method (``eagle3``, or ``peagle`` with its mask token: :mod:`pipeline.eagle3.model.peagle`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.eagle3.common import log, pick_dtype
from pipeline.eagle3.hardware.distributed import Dist
from pipeline.errors import ActionError

__all__ = ["build_drafter", "online_data"]


def build_drafter(args: argparse.Namespace, vcfg: dict[str, Any], aux_layers: list[int],
                  data: Any):
    """A fresh drafter from the verifier and vocab, or the warm-start one (guarded). A
    fresh P-EAGLE drafter's mask token is ``--mask-token-id`` or chosen from ``data``'s
    token counts (:func:`pipeline.eagle3.model.peagle.resolve_mask_token`)."""
    from pipeline.eagle3.model.drafter import (
        DrafterConfig,
        Eagle3Drafter,
        load_drafter,
        verifier_matrix,
    )
    from pipeline.eagle3.text.datafiles import read_vocab

    verifier = Path(args.verifier)
    if args.init_from is not None:
        drafter = load_drafter(Path(args.init_from), embed_from=verifier, dtype=None)
        drafter.float()
        cfg = drafter.config
        where = str(args.init_from)
        if cfg.vocab_size != int(vcfg["vocab_size"]) or cfg.hidden_size != int(vcfg["hidden_size"]):
            raise ActionError(f"drafter is for vocab {cfg.vocab_size} / hidden "
                              f"{cfg.hidden_size}, the verifier has {vcfg['vocab_size']} / "
                              f"{vcfg['hidden_size']}", where=where)
        if cfg.method != args.method:
            raise ActionError(f"the warm-start drafter is a {cfg.method} drafter, this run "
                              f"trains {args.method}", where=where,
                              hint=f"set method: {cfg.method}, or train from scratch")
        if args.mask_token_id is not None and args.mask_token_id != cfg.mask_token_id:
            raise ActionError(f"the warm-start drafter was trained with mask token "
                              f"{cfg.mask_token_id}, not {args.mask_token_id}", where=where,
                              hint="omit --mask-token-id to keep its own")
        if list(cfg.aux_layer_ids) != list(aux_layers):
            raise ActionError(f"drafter was trained on aux layers {cfg.aux_layer_ids}, the "
                              f"hidden states hold {aux_layers}", where=where,
                              hint="extract hidden states with the drafter's aux layers")
        if args.vocab is not None:
            import torch

            d2t, t2d, vpath = read_vocab(Path(args.vocab))
            if not (torch.equal(d2t, drafter.d2t) and torch.equal(t2d, drafter.t2d)):
                same = int((torch.arange(d2t.numel()) + d2t == torch.arange(
                    drafter.d2t.numel()) + drafter.d2t).sum()) if d2t.numel() == \
                    drafter.d2t.numel() else 0
                raise ActionError(
                    f"the vocab mapping differs from the warm-start drafter's own d2t/t2d "
                    f"({same}/{drafter.d2t.numel()} draft ids agree); training with it would "
                    f"silently point the frozen lm_head rows at other tokens",
                    where=str(vpath),
                    hint=f"omit --vocab to keep {where}'s own mapping")
        return drafter
    if args.vocab is None:
        raise ActionError("--vocab is required unless --init-from is given")
    d2t, t2d, vpath = read_vocab(Path(args.vocab))
    if t2d.numel() != int(vcfg["vocab_size"]):
        raise ActionError(f"vocab mapping is for a target vocab of {t2d.numel()}, the verifier "
                          f"has {vcfg['vocab_size']}", where=str(vpath))
    mask, why = None, ""
    if args.method == "peagle":
        from pipeline.eagle3.model.peagle import resolve_mask_token

        vocab = int(vcfg["vocab_size"])
        mask, why = resolve_mask_token(args.mask_token_id, vocab, verifier,
                                       lambda: data.input_counts(vocab))
    cfg = DrafterConfig.from_verifier(vcfg, draft_vocab_size=int(d2t.numel()),
                                      aux_layer_ids=aux_layers, verifier=str(verifier),
                                      intermediate_size=args.intermediate_size,
                                      norm_before_residual=args.norm_before_residual,
                                      method=args.method, mask_token_id=mask,
                                      mask_token_choice=why)
    drafter = Eagle3Drafter(cfg)
    drafter.init_from_verifier(verifier_matrix(verifier, "embed"),
                               verifier_matrix(verifier, "lm_head"), d2t, t2d)
    return drafter


def online_data(args: argparse.Namespace, vcfg: dict[str, Any], dist: Dist):
    """The verifier, placed and loaded here, as the source of every batch's states."""
    from pipeline.eagle3.common import choose_aux_layers
    from pipeline.eagle3.hardware.memory_plan import Workload, load_placed
    from pipeline.eagle3.hardware.placement import placement_from_args
    from pipeline.eagle3.text.datafiles import read_tokens
    from pipeline.eagle3.training.online import OnlineData

    if args.tokens is None:
        raise ActionError("--online needs --tokens (tokenize's output directory)")
    if args.hidden_states is not None:
        raise ActionError("--online and --hidden-states are exclusive: online training "
                          "makes the hidden states itself")
    verifier = Path(args.verifier)
    tokens = read_tokens(Path(args.tokens))
    if tokens["vocab_size"] != int(vcfg["vocab_size"]):
        raise ActionError(f"tokens are for a vocab of {tokens['vocab_size']}, the verifier "
                          f"has {vcfg['vocab_size']}", where=str(tokens["path"]))
    aux, note = choose_aux_layers(args.aux_layers, int(vcfg["num_hidden_layers"]),
                                  str(verifier / "config.json"))
    if note and dist.main:
        log(f"[train] {note}")
    placement = placement_from_args(args, dist.device)
    dtype = pick_dtype(args.verifier_dtype, placement.device)
    offsets = tokens["offsets"]
    longest = int((offsets[1:] - offsets[:-1]).max())
    seq = min(longest, args.max_length, args.batch_tokens)
    work = Workload(batch=max(1, min(args.batch_size, args.batch_tokens // seq)), seq=seq,
                    captured=len(aux) + 1)
    placed = load_placed(verifier, dtype, placement, work, log if dist.main else _quiet)
    data = OnlineData(tokens, placed.model, placed.input_device, aux, seed=args.seed,
                      holdout=args.holdout, max_length=args.max_length, dtype=dtype,
                      verifier_config=vcfg)
    if dist.main:
        log(f"[train] online: the verifier makes each batch's states here; no shards "
            f"(offline would store {data.offline_bytes / 1e9:.3f} GB for these "
            f"{int(offsets[-1])} tokens)")
    return data, placed.plan


def _quiet(_msg: str) -> None:
    pass


