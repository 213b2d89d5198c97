"""The weights a verifier's ``config.json`` implies, by name and shape, without torch.

``harness check`` plans a campaign on a verifier that is not on this machine (Kimi-K2.5:
1T parameters), so it cannot build the model, not even on the meta device. This lists the
checkpoint's tensors (the per-expert layout DeepSeek-V3 and Kimi ship) for the decoder
families the pipeline builds and meets: Llama-like (llama, qwen2, qwen3, mistral) and
DeepSeek-V3 (MLA attention, a first dense block, routed plus shared experts). The test
checks the count against transformers' own model for each family.
"""

from __future__ import annotations

from typing import Any

from pipeline.errors import ActionError
from pipeline.vllm.model_files import text_config as vllm_text_config

Shape = tuple[int, ...]


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A multimodal wrapper's language model config (Kimi-K2.5 nests DeepSeek-V3 in
    ``text_config``), as vLLM picks it, with the wrapper's quantization (which applies to
    the whole checkpoint); the config itself otherwise."""
    inner = vllm_text_config(cfg)
    if inner is cfg:
        return cfg
    merged = dict(inner)
    if "quantization_config" in cfg and "quantization_config" not in merged:
        merged["quantization_config"] = cfg["quantization_config"]
    return merged


def weight_shapes(cfg: dict[str, Any]) -> list[tuple[str, Shape]]:
    cfg = text_config(cfg)
    try:
        h, layers, vocab = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), \
            int(cfg["vocab_size"])
    except (KeyError, TypeError, ValueError):
        raise ActionError("config.json lacks hidden_size, num_hidden_layers or "
                          "vocab_size") from None
    out: list[tuple[str, Shape]] = [("model.embed_tokens.weight", (vocab, h))]
    mla = bool(cfg.get("kv_lora_rank"))
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
        out += _mla(cfg, p, h) if mla else _gqa(cfg, p, h)
        out += _mlp(cfg, p, h, i)
    out.append(("model.norm.weight", (h,)))
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", (vocab, h)))
    return out


def _gqa(cfg: dict[str, Any], p: str, h: int) -> list[tuple[str, Shape]]:
    heads = int(cfg.get("num_attention_heads") or 1)
    kvh = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or h // heads)
    a = p + "self_attn."
    out = [(a + "q_proj.weight", (heads * hd, h)), (a + "k_proj.weight", (kvh * hd, h)),
           (a + "v_proj.weight", (kvh * hd, h)), (a + "o_proj.weight", (h, heads * hd))]
    if cfg.get("model_type") == "qwen3":
        out += [(a + "q_norm.weight", (hd,)), (a + "k_norm.weight", (hd,))]
    if cfg.get("attention_bias") or cfg.get("model_type") == "qwen2":
        out += [(a + "q_proj.bias", (heads * hd,)), (a + "k_proj.bias", (kvh * hd,)),
                (a + "v_proj.bias", (kvh * hd,))]
    return out


def _mla(cfg: dict[str, Any], p: str, h: int) -> list[tuple[str, Shape]]:
    heads = int(cfg["num_attention_heads"])
    nope, rope = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"])
    v, kv_rank = int(cfg["v_head_dim"]), int(cfg["kv_lora_rank"])
    q_rank = cfg.get("q_lora_rank")
    a = p + "self_attn."
    out: list[tuple[str, Shape]] = []
    if q_rank:
        out += [(a + "q_a_proj.weight", (int(q_rank), h)),
                (a + "q_a_layernorm.weight", (int(q_rank),)),
                (a + "q_b_proj.weight", (heads * (nope + rope), int(q_rank)))]
    else:
        out.append((a + "q_proj.weight", (heads * (nope + rope), h)))
    out += [(a + "kv_a_proj_with_mqa.weight", (kv_rank + rope, h)),
            (a + "kv_a_layernorm.weight", (kv_rank,)),
            (a + "kv_b_proj.weight", (heads * (nope + v), kv_rank)),
            (a + "o_proj.weight", (h, heads * v))]
    return out


def _ffn(prefix: str, h: int, inter: int) -> list[tuple[str, Shape]]:
    return [(prefix + "gate_proj.weight", (inter, h)), (prefix + "up_proj.weight", (inter, h)),
            (prefix + "down_proj.weight", (h, inter))]


def _mlp(cfg: dict[str, Any], p: str, h: int, i: int) -> list[tuple[str, Shape]]:
    experts = int(cfg.get("n_routed_experts") or 0)
    dense_first = int(cfg.get("first_k_dense_replace") or 0)
    freq = int(cfg.get("moe_layer_freq") or 1)
    if not experts or i < dense_first or i % freq:
        return _ffn(p + "mlp.", h, int(cfg["intermediate_size"]))
    inter = int(cfg["moe_intermediate_size"])
    out = [(p + "mlp.gate.weight", (experts, h)),
           (p + "mlp.gate.e_score_correction_bias", (experts,))]
    for e in range(experts):
        out += _ffn(f"{p}mlp.experts.{e}.", h, inter)
    shared = int(cfg.get("n_shared_experts") or 0)
    if shared:
        out += _ffn(p + "mlp.shared_experts.", h, inter * shared)
    return out


def active_params_per_token(cfg: dict[str, Any]) -> int:
    """Weights one token multiplies with in the body (routed experts: only the top-k), for
    scaling a measured tokens/s to another shape by FLOPs; lm_head excluded."""
    cfg = text_config(cfg)
    experts = int(cfg.get("n_routed_experts") or 0)
    topk = int(cfg.get("num_experts_per_tok") or 1)
    total = 0
    for name, shape in weight_shapes(cfg):
        if len(shape) < 2 or name.startswith(("model.embed_tokens", "lm_head")):
            continue
        n = shape[0] * shape[1]
        total += n * topk // experts if ".mlp.experts." in name and experts else n
    return total
