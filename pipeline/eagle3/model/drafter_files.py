"""A drafter as stored: its config (:class:`DrafterConfig`), the exported directories vLLM
loads read back into it (:func:`read_exported`), and safetensors loading with our errors.

Below both :mod:`pipeline.eagle3.model.drafter` (the model, which loads either kind of directory) and
:mod:`pipeline.eagle3.export` (which writes the exported format and proves the round trip).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.errors import ActionError

__all__ = ["EAGLE_ARCH", "SPECULATORS_ARCH", "SPECULATORS_ARCHS", "DrafterConfig",
           "load_safetensors", "read_exported", "verifier_heads"]

EAGLE_ARCH = "LlamaForCausalLMEagle3"
SPECULATORS_ARCH = "Eagle3Speculator"
#: speculators_model_type -> the architecture speculators names in such a config (vLLM's
#: reader replaces it: algos.update_eagle3/update_peagle pick its own class)
SPECULATORS_ARCHS = {"eagle3": SPECULATORS_ARCH, "peagle": "PEagleSpeculator"}


@dataclass
class DrafterConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int  # the target's
    draft_vocab_size: int
    target_hidden_size: int
    aux_layer_ids: list[int]
    target_num_layers: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    norm_before_residual: bool = False
    hidden_act: str = "silu"
    verifier: str = ""
    target_architectures: list[str] = field(default_factory=lambda: ["LlamaForCausalLM"])
    target_model_type: str = "llama"
    #: ``eagle3`` (sequential drafting) or ``peagle`` (parallel drafting: draft positions
    #: 2..k read the mask token and the learned ``mask_hidden``, :mod:`pipeline.eagle3.model.peagle`)
    method: str = "eagle3"
    mask_token_id: int | None = None
    mask_token_choice: str = ""   # why that token (recorded by train)

    @property
    def parallel(self) -> bool:
        return self.method == "peagle"

    @classmethod
    def from_verifier(cls, vcfg: dict[str, Any], *, draft_vocab_size: int,
                      aux_layer_ids: list[int], verifier: str = "",
                      intermediate_size: int | None = None,
                      norm_before_residual: bool = False, method: str = "eagle3",
                      mask_token_id: int | None = None,
                      mask_token_choice: str = "") -> DrafterConfig:
        heads, kv_heads, head_dim = verifier_heads(vcfg)
        hidden = int(vcfg["hidden_size"])
        rope = vcfg.get("rope_parameters") or {}
        theta = vcfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        return cls(hidden_size=hidden,
                   intermediate_size=int(intermediate_size or vcfg["intermediate_size"]),
                   num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                   vocab_size=int(vcfg["vocab_size"]), draft_vocab_size=draft_vocab_size,
                   target_hidden_size=hidden, aux_layer_ids=list(aux_layer_ids),
                   target_num_layers=int(vcfg["num_hidden_layers"]),
                   rms_norm_eps=float(vcfg.get("rms_norm_eps", 1e-6)), rope_theta=float(theta),
                   max_position_embeddings=int(vcfg.get("max_position_embeddings", 4096)),
                   norm_before_residual=norm_before_residual,
                   hidden_act=str(vcfg.get("hidden_act", "silu")), verifier=verifier,
                   target_architectures=list(vcfg.get("architectures") or ["LlamaForCausalLM"]),
                   target_model_type=str(vcfg.get("model_type", "llama")), method=method,
                   mask_token_id=mask_token_id, mask_token_choice=mask_token_choice)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DrafterConfig:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


def verifier_heads(vcfg: dict[str, Any]) -> tuple[int, int, int]:
    """``(heads, kv_heads, head_dim)`` of the drafter's Llama attention for this verifier.

    Llama/Qwen (GQA): the verifier's own; Qwen3's explicit ``head_dim`` is kept even where
    ``heads * head_dim != hidden_size``. MLA (DeepSeek-V3, Kimi-K2: ``kv_lora_rank`` in the
    config) has no Llama head layout: its queries and keys are ``qk_nope + qk_rope`` wide,
    only the rope part rotates, and K/V come from a low-rank latent. The drafter takes the
    verifier's head count for both q and kv (MLA has one KV head per query head) and the
    value width ``v_head_dim`` as its head dim (Kimi-K2: 64 heads x 128), rotating all of
    it with the plain rope of the verifier's ``rope_theta``: the config's ``head_dim`` is
    MLA's rope width (64), which would halve the attention, and YaRN scaling is not
    carried (export writes none, so vLLM runs the drafter as it was trained).
    """
    heads = int(vcfg["num_attention_heads"])
    hidden = int(vcfg["hidden_size"])
    if vcfg.get("kv_lora_rank"):
        head_dim = int(vcfg.get("v_head_dim") or vcfg.get("qk_nope_head_dim") or hidden // heads)
        return heads, heads, head_dim
    kv_heads = int(vcfg.get("num_key_value_heads") or heads)
    return heads, kv_heads, int(vcfg.get("head_dim") or hidden // heads)


def read_exported(path: Path) -> tuple[DrafterConfig, dict[str, torch.Tensor]]:
    """``(DrafterConfig, state dict in the model's own names)`` from an exported directory."""
    cfg_path = path / "config.json"
    try:
        raw = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as exc:
        raise ActionError(f"config.json is not valid JSON ({exc.msg})", where=str(cfg_path)) \
            from None
    arch = (raw.get("architectures") or [""])[0]
    spec_type = raw.get("speculators_model_type")
    if arch in SPECULATORS_ARCHS.values() or spec_type in SPECULATORS_ARCHS:
        llama = raw.get("transformer_layer_config") or {}
        layer_prefix = "layers.0."
    elif arch in (EAGLE_ARCH, "Eagle3LlamaForCausalLM"):
        llama = raw
        layer_prefix = "midlayer."
    else:
        raise ActionError(f"not an EAGLE-3 drafter (architectures {raw.get('architectures')})",
                          where=str(cfg_path))
    method = "peagle" if spec_type == "peagle" or arch == SPECULATORS_ARCHS["peagle"] else \
        "eagle3"
    mask = raw.get("mask_token_id")
    if method == "peagle" and not (isinstance(mask, int) and not isinstance(mask, bool)):
        raise ActionError("a peagle drafter needs an integer mask_token_id (vLLM requires it)",
                          where=str(cfg_path))
    aux = (raw.get("eagle_aux_hidden_state_layer_ids")
           or (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [])
    extra = raw.get("eagle3_training") or {}
    hidden = int(llama["hidden_size"])
    heads = int(llama["num_attention_heads"])
    rope = llama.get("rope_parameters") or {}
    cfg = DrafterConfig(
        hidden_size=hidden, intermediate_size=int(llama["intermediate_size"]),
        num_attention_heads=heads,
        num_key_value_heads=int(llama.get("num_key_value_heads") or heads),
        head_dim=int(llama.get("head_dim") or hidden // heads),
        vocab_size=int(llama["vocab_size"]), draft_vocab_size=int(raw["draft_vocab_size"]),
        target_hidden_size=int(raw.get("target_hidden_size") or hidden),
        aux_layer_ids=list(aux), target_num_layers=int(extra.get("target_num_layers", 0)),
        rms_norm_eps=float(llama.get("rms_norm_eps", 1e-6)),
        rope_theta=float(llama.get("rope_theta", rope.get("rope_theta", 10000.0))),
        max_position_embeddings=int(llama.get("max_position_embeddings", 4096)),
        norm_before_residual=bool(raw.get("norm_before_residual", False)),
        hidden_act=str(llama.get("hidden_act", "silu")),
        verifier=str(extra.get("verifier") or ((raw.get("speculators_config") or {}).get(
            "verifier") or {}).get("name_or_path", "")),
        target_architectures=list(extra.get("target_architectures") or ((raw.get(
            "speculators_config") or {}).get("verifier") or {}).get("architectures")
            or ["LlamaForCausalLM"]),
        target_model_type=str(extra.get("target_model_type", "llama")), method=method,
        mask_token_id=mask if method == "peagle" else None,
        mask_token_choice=str(extra.get("mask_token_choice", "")))
    weights = load_safetensors(path / "model.safetensors")
    state = {("midlayer." + k[len(layer_prefix):] if k.startswith(layer_prefix) else k): v
             for k, v in weights.items()}
    for key in ("d2t", "t2d"):
        if key not in state:
            raise ActionError(f"no {key} tensor: vLLM would silently use an identity mapping",
                              where=str(path / "model.safetensors"))
    return cfg, state


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise ActionError("weights file missing", where=str(path))
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise ActionError(f"unreadable weights ({str(exc).splitlines()[0]})",
                          where=str(path)) from None
