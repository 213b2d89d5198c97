"""A drafter checkpoint as vLLM would serve it, and the untrained drafter it is compared with.

:func:`load_served` builds the drafter from a checkpoint directory the way vLLM runs it:
aux ids from the config (vLLM's default when absent) fed in vLLM's ascending order, a
missing ``d2t`` replaced by the identity mapping vLLM falls back to, the checkpoint's own
embeddings kept (else the verifier's), and every config vLLM would run differently from
this drafter model refused (:class:`NotServable`), so the functional checks measure what
serving would see. :func:`untrained_like` is the freshly initialised baseline of the same
shape and vocab mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.eagle3.common import default_aux_layers, vllm_aux_order
from pipeline.eagle3.model.checkpoint_files import (
    DrafterLayout,
    WeightSet,
    read_layout,
    resolve_checkpoint_dir,
    weight_files,
)
from pipeline.eagle3.model.drafter import DrafterConfig, Eagle3Drafter


class NotServable(Exception):
    """The checkpoint cannot be run as a drafter; the message says why."""


@dataclass
class Served:
    model: Eagle3Drafter
    notes: list[str] = field(default_factory=list)
    #: the aux ids in the config's order (the model runs vLLM's ascending order)
    config_aux: list[int] = field(default_factory=list)


def load_served(path: Path, verifier: Any, device: torch.device, dtype: torch.dtype,
                layout: DrafterLayout | None = None) -> Served:
    """The drafter as vLLM would run it, with the verifier's embeddings."""
    directory = resolve_checkpoint_dir(Path(path))
    lay = layout or read_layout(directory)
    if lay.fmt == "unknown":
        raise NotServable(f"vLLM would not load architecture {lay.architectures}")
    vcfg = verifier.config
    n_layers = int(vcfg.num_hidden_layers)
    need = {k: getattr(lay, k) for k in ("hidden_size", "intermediate_size",
                                         "num_attention_heads", "vocab_size",
                                         "draft_vocab_size")}
    missing = [k for k, v in need.items() if v is None]
    if missing:
        raise NotServable(f"config lacks {', '.join(missing)}")
    notes = []
    aux = lay.aux_layer_ids
    if aux is None:
        aux = default_aux_layers(n_layers)
        notes.append(f"no aux ids in the config: vLLM's default {aux}")
    served_aux = vllm_aux_order(aux)
    if len(served_aux) != len(aux):
        raise NotServable(f"aux layer ids {aux} repeat an id: vLLM de-duplicates them to "
                          f"{served_aux}, {len(served_aux)} states for an fc that takes "
                          f"{len(aux)}")
    if served_aux != aux:
        notes.append(f"aux ids {aux} fed in vLLM's ascending order {served_aux}")
    unsupported = [k for k in ("norm_before_fc", "fc_norm", "norm_output")
                   if _flag(lay, k)]
    if unsupported:
        raise NotServable(f"the config sets {', '.join(unsupported)}, which vLLM applies "
                          "and this verifier's drafter model does not: its figures would "
                          "not be vLLM's")
    parallel = lay.method == "peagle"
    mask = lay.mask_token_id
    if parallel and not (isinstance(mask, int) and not isinstance(mask, bool)
                         and 0 <= mask < int(vcfg.vocab_size)):
        raise NotServable(f"mask_token_id {mask!r} is not a token of the verifier: vLLM "
                          "needs one for the parallel-drafting rows")
    cfg = DrafterConfig(
        hidden_size=lay.hidden_size, intermediate_size=lay.intermediate_size,  # type: ignore[arg-type]
        num_attention_heads=lay.num_attention_heads,  # type: ignore[arg-type]
        num_key_value_heads=lay.num_key_value_heads or lay.num_attention_heads,  # type: ignore[arg-type]
        head_dim=lay.head_dim or lay.hidden_size // lay.num_attention_heads,  # type: ignore[operator]
        vocab_size=lay.vocab_size, draft_vocab_size=lay.draft_vocab_size,  # type: ignore[arg-type]
        target_hidden_size=lay.target_hidden_size or lay.hidden_size,  # type: ignore[arg-type]
        aux_layer_ids=served_aux, target_num_layers=n_layers,
        rms_norm_eps=float((lay.raw.get("transformer_layer_config") or lay.raw)
                           .get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(lay), norm_before_residual=lay.norm_before_residual,
        method=lay.method, mask_token_id=mask if parallel else None)
    if any(a < 0 or a >= n_layers for a in cfg.aux_layer_ids):
        raise NotServable(f"aux layer ids {cfg.aux_layer_ids} are not layers of the verifier")
    state: dict[str, torch.Tensor] = {}
    with WeightSet.open(weight_files(directory)) as ws:
        for name in ws.tensors:
            key = name
            for prefix in lay.layer_prefixes:
                if name.startswith(prefix):
                    key = "midlayer." + name[len(prefix):]
            state[key] = ws.get(name)
    if "d2t" not in state:
        state["d2t"] = torch.zeros(cfg.draft_vocab_size, dtype=torch.int64)
        notes.append("no d2t: run with the identity mapping vLLM falls back to")
    if "t2d" not in state:
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        ids = torch.arange(cfg.draft_vocab_size) + state["d2t"].long()
        t2d[ids.clamp(0, cfg.vocab_size - 1)] = True
        state["t2d"] = t2d
    state["d2t"] = state["d2t"].long()
    state["t2d"] = state["t2d"].bool()
    if parallel:
        if "mask_hidden" not in state:
            raise NotServable("no mask_hidden tensor: vLLM refuses to load a parallel-"
                              "drafting drafter without it ('mask_hidden not found in "
                              "weights')")
        fc_in = 3 * cfg.target_hidden_size
        if state["mask_hidden"].numel() != fc_in:
            raise NotServable(f"mask_hidden holds {state['mask_hidden'].numel()} values, "
                              f"fc takes {fc_in}")
        state["mask_hidden"] = state["mask_hidden"].reshape(1, 1, fc_in)  # vLLM's view
    elif "mask_hidden" in state:
        del state["mask_hidden"]
        notes.append("mask_hidden ignored: not a parallel-drafting config (vLLM skips it)")
    if "embed_tokens.weight" in state and lay.fmt != "checkpoint":
        # vLLM keeps a checkpoint's own embeddings (shares the target's only when they
        # are absent or identical)
        notes.append("the checkpoint's own embed_tokens (vLLM keeps them)")
    elif "embed_tokens.weight" not in state:
        state["embed_tokens.weight"] = verifier.get_input_embeddings().weight.detach().cpu()
    model = Eagle3Drafter(cfg)
    try:
        missing_keys, unexpected = model.load_state_dict(
            {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()},
            strict=False)
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "size mismatch" in ln]
        raise NotServable("weights do not fit the config: "
                          + ("; ".join(lines[:3]) or str(exc).splitlines()[0])) from None
    if missing_keys:
        raise NotServable(f"weights missing: {', '.join(missing_keys)}")
    if unexpected:
        notes.append(f"ignored unknown tensors: {', '.join(unexpected[:5])}")
    ids = torch.arange(cfg.draft_vocab_size) + model.d2t
    if bool(((ids < 0) | (ids >= cfg.vocab_size)).any()):
        raise NotServable("d2t maps draft ids outside the vocabulary (vLLM would index out "
                          "of range)")
    return Served(model.to(device=device, dtype=dtype).eval(), notes, list(aux))


def _flag(lay: DrafterLayout, key: str) -> bool:
    """A boolean network flag as vLLM reads it (eagle_config first, for EAGLE configs)."""
    base = lay.raw.get("transformer_layer_config") if lay.fmt == "speculators" else lay.raw
    base = base if isinstance(base, dict) else {}
    inner = lay.raw.get("eagle_config") if isinstance(lay.raw.get("eagle_config"), dict) else {}
    return bool(inner.get(key, lay.raw.get(key, base.get(key, False))))


def _rope_theta(lay: DrafterLayout) -> float:
    llama = lay.raw.get("transformer_layer_config") if lay.fmt == "speculators" else lay.raw
    llama = llama if isinstance(llama, dict) else {}
    rope = llama.get("rope_parameters") if isinstance(llama.get("rope_parameters"), dict) else {}
    return float(llama.get("rope_theta", rope.get("rope_theta", 10000.0)))


def untrained_like(drafter: Eagle3Drafter, verifier: Any, seed: int) -> Eagle3Drafter:
    """A freshly initialised drafter of the same shape, mapping and frozen verifier rows."""
    torch.manual_seed(seed)
    fresh = Eagle3Drafter(DrafterConfig.from_dict(drafter.config.to_dict()))
    head = verifier.get_output_embeddings().weight.detach().cpu().float()
    embed = verifier.get_input_embeddings().weight.detach().cpu().float()
    fresh.init_from_verifier(embed, head, drafter.d2t.cpu(), drafter.t2d.cpu())
    p = next(drafter.parameters())
    return fresh.to(device=p.device, dtype=p.dtype).eval()

