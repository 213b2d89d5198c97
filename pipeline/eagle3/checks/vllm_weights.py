"""Which tensors vLLM fills from the drafter checkpoint, and which it takes from the target.

A missing ``d2t``, ``lm_head`` or ``norm.weight`` loads silently in vLLM (as the identity
mapping, the target's head, or ones), so the loader's view is worth stating. Two sources:

- **vLLM's own**: with a vLLM interpreter, :func:`pipeline.vllm.probe.weight_sources`
  builds vLLM's drafter class on the meta device and feeds its ``load_weights`` the
  checkpoint's names and shapes; every parameter it fills is recorded, and what is left
  is taken from the target (embeddings, lm_head: vLLM's proposer shares them when the
  checkpoint has none) or stays at its initial value;
- **our table** (:data:`VLLM_NAMES`) otherwise: vLLM 0.33.0's ``llama_eagle3.py`` as read
  from its code (``midlayer.`` becomes ``layers.0.``, q/k/v stack into ``qkv_proj``,
  gate/up into ``gate_up_proj``, ``d2t`` becomes ``draft_id_to_target_id``, ``t2d`` is
  skipped), and for a P-EAGLE drafter vLLM 0.26.0's: ``mask_hidden`` is copied into the
  buffer of that name, and a parallel-drafting drafter without it is refused at load
  (``mask_hidden not found in weights``); an EAGLE-3 config's ``mask_hidden`` is skipped.

The check is ``vllm_weights``: it fails when vLLM would leave a parameter at its initial
value, fill it only in part, or refuse a tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.actions import Check
from pipeline.eagle3.model.checkpoint_files import DrafterLayout

LAYER = "model.layers.0."
#: checkpoint name (without the format's layer prefix, for the decoder layer) -> the
#: parameter of vLLM 0.33.0's Eagle3LlamaForCausalLM it fills
VLLM_NAMES: dict[str, str] = {
    "self_attn.q_proj.weight": LAYER + "self_attn.qkv_proj.weight",
    "self_attn.k_proj.weight": LAYER + "self_attn.qkv_proj.weight",
    "self_attn.v_proj.weight": LAYER + "self_attn.qkv_proj.weight",
    "self_attn.o_proj.weight": LAYER + "self_attn.o_proj.weight",
    "mlp.gate_proj.weight": LAYER + "mlp.gate_up_proj.weight",
    "mlp.up_proj.weight": LAYER + "mlp.gate_up_proj.weight",
    "mlp.down_proj.weight": LAYER + "mlp.down_proj.weight",
    "input_layernorm.weight": LAYER + "input_layernorm.weight",
    "post_attention_layernorm.weight": LAYER + "post_attention_layernorm.weight",
    "hidden_norm.weight": LAYER + "hidden_norm.weight",
}
TOP_NAMES: dict[str, str] = {
    "fc.weight": "model.fc.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
    "embed_tokens.weight": "model.embed_tokens.weight",
    "d2t": "draft_id_to_target_id",
}
IGNORED = ("t2d",)
#: what a parameter holds when nothing fills it (vLLM's initialisation)
INITIAL = {"model.norm.weight": "ones", "draft_id_to_target_id": "zeros: the identity map",
           "mask_hidden": "absent: vLLM refuses to load a parallel-drafting drafter without "
                          "it",
           LAYER + "input_layernorm.weight": "ones", LAYER + "hidden_norm.weight": "ones",
           LAYER + "post_attention_layernorm.weight": "ones"}
SHARED_FROM_TARGET = ("model.embed_tokens.weight", "lm_head.weight")


def _parts(name: str) -> int:
    """How many checkpoint tensors fill one vLLM parameter (stacked q/k/v, gate/up)."""
    return sum(1 for v in VLLM_NAMES.values() if v == name) or 1


def table_sources(layout: DrafterLayout, names: list[str], target_vocab: int
                  ) -> dict[str, Any]:
    """What :data:`VLLM_NAMES` says vLLM's loader does with these checkpoint names."""
    parallel = layout.method == "peagle"
    params = sorted(set(VLLM_NAMES.values()) | set(TOP_NAMES.values())
                    | ({"mask_hidden"} if parallel else set()))
    draft = layout.draft_vocab_size or target_vocab
    if draft == target_vocab:
        params.remove("draft_id_to_target_id")  # vLLM has no mapping then
    filled: dict[str, list[str]] = {}
    ignored, refused = [], {}
    for name in names:
        key = next((name[len(p):] for p in layout.layer_prefixes if name.startswith(p)), None)
        param = VLLM_NAMES.get(key) if key is not None else TOP_NAMES.get(name)
        if name == "mask_hidden":
            param = "mask_hidden" if parallel else None
        if name in IGNORED or (name == "mask_hidden" and not parallel):
            ignored.append(name)
        elif param is None or param not in params:
            refused[name] = "not a tensor of vLLM's EAGLE-3 Llama drafter"
        else:
            filled.setdefault(param, []).append(name)
    target = [p for p in SHARED_FROM_TARGET if p not in filled]
    initial = [p for p in params if p not in filled and p not in target]
    return {"source": "table", "checkpoint": {p: filled[p] for p in params if p in filled},
            "target": target, "initial": initial, "ignored": ignored, "refused": refused}


def vllm_sources(answer: Mapping[str, Any], version: str | None) -> dict[str, Any]:
    """The probe's answer in the table's shape."""
    return {"source": f"vllm {version}", "class": answer.get("class"),
            "checkpoint": dict(answer.get("checkpoint") or {}),
            "target": list(answer.get("target") or []),
            "initial": list(answer.get("initial") or []),
            "ignored": list(answer.get("ignored") or []),
            "refused": dict(answer.get("refused") or {}),
            "load_error": answer.get("load_error")}


def weights_check(sources: Mapping[str, Any], *, own_vocab: bool, note: str = "") -> Check:
    """``vllm_weights`` from :func:`table_sources` or :func:`vllm_sources`; ``own_vocab``:
    the draft vocabulary is smaller than the target's (so the target's head cannot serve)."""
    filled = sources["checkpoint"]
    partial = {p: n for p, n in filled.items() if len(n) < _parts(p)}
    who = ("FALLBACK (no vLLM to ask; vLLM 0.33.0's llama_eagle3.py loader as tabled in "
           "pipeline/eagle3/checks/vllm_weights.py)" if sources["source"] == "table" else
           f"{sources['source']}'s {str(sources.get('class') or 'drafter').rsplit('.', 1)[-1]}"
           " (its own load_weights)")
    problems = []
    if sources["initial"]:
        problems.append("leaves " + ", ".join(
            f"{p} at its initial value ({INITIAL.get(p, 'uninitialised memory')})"
            for p in sources["initial"]) + ": the checkpoint has no tensor for it"
            + (f" (vLLM: {sources['load_error']})" if sources.get("load_error") else ""))
    if own_vocab and "lm_head.weight" in sources["target"]:
        problems.append("takes lm_head.weight from the target, whose rows are the whole "
                        "vocabulary, not the draft ids: the checkpoint has no lm_head")
    if partial:
        problems.append("fills only part of " + ", ".join(
            f"{p} (from {', '.join(n)})" for p, n in partial.items()))
    if sources["refused"]:
        problems.append("refuses " + "; ".join(f"{n} ({why})" for n, why in
                                               list(sources["refused"].items())[:4]))
    said = [f"fills {len(filled)} parameters from the checkpoint"]
    if sources["target"]:
        said.append(f"takes {', '.join(sources['target'])} from the target")
    if sources["ignored"]:
        said.append(f"ignores {', '.join(sources['ignored'])}")
    message = f"{who} " + "; ".join(problems or said) + (f"; {note}" if note else "")
    value = {"checkpoint": len(filled), "target": sources["target"],
             "initial": sources["initial"], "ignored": sources["ignored"],
             "refused": sorted(sources["refused"])}
    return Check("vllm_weights", not problems, value=value,
                 expected="every parameter from the checkpoint or the target",
                 message=message)
