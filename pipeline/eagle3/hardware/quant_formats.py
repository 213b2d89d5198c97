"""The two quantized formats the seed's verifiers ship in, as stored on disk.

- **FP8 block-scaled** (DeepSeek-V3, Kimi-K2): every decoder projection's weight is
  ``float8_e4m3fn`` with one fp32 ``weight_scale_inv`` per 128 x 128 block (``weight =
  fp8 * scale_inv``); embeddings, norms, the MoE router and ``lm_head`` stay bf16.
  ``config.json``: ``quantization_config = {quant_method: fp8, fmt: e4m3, activation_scheme:
  dynamic, weight_block_size: [128, 128]}``.
- **compressed-tensors INT4 pack-quantized** (Kimi-K2.5, Kimi-K2-Thinking): a weight becomes
  ``weight_packed`` (int32, eight 4-bit values per word along the input dim, the first in
  the low bits, each stored as ``q + 8``), ``weight_scale`` (bf16, one per group of 32 inputs,
  symmetric: ``weight = q * scale``) and ``weight_shape`` (the original ``[out, in]``). Kimi
  quantizes the routed experts only; attention, the shared expert and the dense first layer
  stay bf16 (the ``ignore`` list says so).

:func:`quantize_state` and :func:`dequantize_state` are the format in pure torch: the builder
(:mod:`pipeline.eagle3.hardware.quantize_checkpoint`) writes checkpoints with them, and the tests compare what
transformers loads against them. :func:`stored_weight_bytes` counts what a parameter of a
given shape takes on disk in a format, which the memory plan and ``harness check`` use; it
is standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

FP8_BLOCK = (128, 128)
FP8_MAX = 448.0                 # largest finite float8_e4m3fn
INT4_GROUP = 32                 # Kimi-K2.5's group size
INT4_PER_WORD = 8

# Decoder projections (what FP8 quantizes): q/k/v/o, MLA's q_a/q_b/kv_a/kv_b, the MLP's
# gate/up/down in dense layers, shared and routed experts. Not the router (mlp.gate).
# Routed experts appear per expert in checkpoints (experts.7.up_proj.weight) and fused in
# transformers 5 models (experts.gate_up_proj, [experts, 2 x inter, hidden]).
_FUSED = r"|.*\.layers\.\d+\.mlp\.experts\.(?:gate_up|down)_proj"
_PROJ = re.compile(r".*\.layers\.\d+\..*_proj(?:_with_mqa)?\.weight" + _FUSED)
_ROUTED = re.compile(r".*\.layers\.\d+\.mlp\.experts\.\d+\.(?:gate|up|down)_proj\.weight"
                     + _FUSED)

# Kimi-K2-Thinking/K2.5's ignore list: everything but the routed experts stays bf16.
KIMI_INT4_IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                    r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"]


@dataclass(frozen=True)
class QuantFormat:
    """What a checkpoint's ``quantization_config`` says, in the terms the planner needs."""

    kind: str                   # "fp8-block", "int4-pack", or "other"
    method: str                 # quant_method as written
    block: tuple[int, int] | None = None
    group: int | None = None
    targets: str = "all"        # int4: "experts" (Kimi's ignore list) or "all" projections

    @property
    def label(self) -> str:
        if self.kind == "fp8-block":
            b = self.block or FP8_BLOCK
            return f"FP8 block-scaled (quant_method fp8, weight_block_size [{b[0]}, {b[1]}])"
        if self.kind == "int4-pack":
            return (f"INT4 compressed-tensors pack-quantized (group size {self.group}, "
                    f"{'routed experts' if self.targets == 'experts' else 'all projections'})")
        return f"quantization {self.method!r}"

    def quantizes(self, name: str) -> bool:
        """Whether the checkpoint weight ``name`` (a ``.weight`` of the per-expert layout)
        is stored quantized."""
        if self.kind == "fp8-block":
            return bool(_PROJ.fullmatch(name))
        if self.kind == "int4-pack":
            pat = _ROUTED if self.targets == "experts" else _PROJ
            return bool(pat.fullmatch(name))
        return False


def quant_format(cfg: dict[str, Any]) -> QuantFormat | None:
    """The format of a ``config.json`` (its ``text_config``'s, for a multimodal wrapper);
    None for an unquantized checkpoint."""
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict) and isinstance(cfg.get("text_config"), dict):
        qc = cfg["text_config"].get("quantization_config")
    if not isinstance(qc, dict):
        return None
    method = str(qc.get("quant_method", "?"))
    if method == "fp8" and qc.get("weight_block_size"):
        b = qc["weight_block_size"]
        return QuantFormat("fp8-block", method, block=(int(b[0]), int(b[1])))
    if method == "compressed-tensors" and qc.get("format") == "pack-quantized":
        groups = qc.get("config_groups") or {}
        w = next((g.get("weights") or {} for g in groups.values() if isinstance(g, dict)), {})
        if int(w.get("num_bits") or 0) == 4 and w.get("type", "int") == "int":
            ignore = [str(x) for x in qc.get("ignore") or []]
            experts_only = any("self_attn" in x for x in ignore)
            return QuantFormat("int4-pack", method, group=int(w.get("group_size") or 32),
                               targets="experts" if experts_only else "all")
    return QuantFormat("other", method)


def fp8_config(block: tuple[int, int] = FP8_BLOCK) -> dict[str, Any]:
    """``quantization_config`` as DeepSeek-V3 and Kimi-K2 ship it."""
    return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
            "weight_block_size": list(block)}


def int4_config(group: int = INT4_GROUP, targets: str = "experts") -> dict[str, Any]:
    """``quantization_config`` as Kimi-K2.5 ships it (``targets="experts"``), or with every
    projection quantized (``"all"``, for dense verifiers)."""
    weights = {"actorder": None, "block_structure": None, "dynamic": False,
               "group_size": group, "num_bits": 4, "observer": "minmax",
               "observer_kwargs": {}, "strategy": "group", "symmetric": True, "type": "int"}
    ignore = KIMI_INT4_IGNORE if targets == "experts" else ["lm_head"]
    return {"config_groups": {"group_0": {"input_activations": None,
                                          "output_activations": None,
                                          "targets": ["Linear"], "weights": weights}},
            "format": "pack-quantized", "ignore": list(ignore), "kv_cache_scheme": None,
            "quant_method": "compressed-tensors", "quantization_status": "compressed"}


def stored_parts(fmt: QuantFormat | None, name: str, shape: tuple[int, ...],
                 itemsize: int, dense_dtype: str = "bfloat16") -> dict[str, int]:
    """Bytes the weight ``name`` of ``shape`` takes as stored, by stored dtype (values and
    scales apart); ``itemsize``/``dense_dtype``: an unquantized element (bf16: 2)."""
    n = math.prod(shape)
    if fmt is None or len(shape) < 2 or not fmt.quantizes(name):
        return {dense_dtype: n * itemsize}
    *lead, rows, cols = shape
    outer = math.prod(lead) if lead else 1
    if fmt.kind == "fp8-block":
        br, bc = fmt.block or FP8_BLOCK
        return {"float8_e4m3fn": n,
                "float32": outer * math.ceil(rows / br) * math.ceil(cols / bc) * 4}
    group = fmt.group or INT4_GROUP
    return {"int32": outer * rows * math.ceil(cols / INT4_PER_WORD) * 4,
            "bfloat16": outer * rows * math.ceil(cols / group) * 2,
            "int64": outer * 2 * 8}  # weight_shape, one per linear


def stored_weight_bytes(fmt: QuantFormat | None, name: str, shape: tuple[int, ...],
                        itemsize: int) -> int:
    """Bytes the weight ``name`` of ``shape`` takes as stored, with its scales."""
    return sum(stored_parts(fmt, name, shape, itemsize).values())


# -- the formats in torch ----------------------------------------------------------------------

def fp8_quantize(w: Any, block: tuple[int, int] = FP8_BLOCK) -> tuple[Any, Any]:
    """``(weight float8_e4m3fn, weight_scale_inv fp32 [ceil(r/br), ceil(c/bc)])``."""
    import torch

    rows, cols = w.shape
    br, bc = block
    nr, nc = math.ceil(rows / br), math.ceil(cols / bc)
    padded = torch.zeros(nr * br, nc * bc, dtype=torch.float32)
    padded[:rows, :cols] = w.float()
    blocks = padded.view(nr, br, nc, bc)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale_inv = amax / FP8_MAX
    q = (blocks / scale_inv[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(nr * br, nc * bc)[:rows, :cols].to(torch.float8_e4m3fn)
    return q.contiguous(), scale_inv.contiguous()


def fp8_dequantize(q: Any, scale_inv: Any, dtype: Any,
                   block: tuple[int, int] = FP8_BLOCK) -> Any:
    rows, cols = q.shape
    br, bc = block
    s = scale_inv.repeat_interleave(br, 0).repeat_interleave(bc, 1)[:rows, :cols]
    return (q.float() * s).to(dtype)


def int4_quantize(w: Any, group: int = INT4_GROUP) -> tuple[Any, Any, Any]:
    """``(weight_packed int32 [r, c/8], weight_scale bf16 [r, c/group], weight_shape)``:
    symmetric min-max, ``scale = absmax / 7.5`` (the 15 steps of [-8, 7] over the range),
    ``q = round(w / scale)`` clamped to [-8, 7]."""
    import torch

    rows, cols = w.shape
    if cols % group or cols % INT4_PER_WORD:
        raise ValueError(f"INT4 group quantization needs the input dim ({cols}) to be a "
                         f"multiple of the group size {group}")
    g = w.float().view(rows, cols // group, group)
    scale = (g.abs().amax(dim=-1) / 7.5).clamp(min=1e-8).to(torch.bfloat16)
    q = torch.round(g / scale.float()[..., None]).clamp(-8, 7).to(torch.int64).view(rows, cols)
    u = (q + 8).view(rows, cols // INT4_PER_WORD, INT4_PER_WORD)
    shifts = torch.arange(INT4_PER_WORD, dtype=torch.int64) * 4
    words = (u << shifts).sum(dim=-1)
    packed = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
    return packed.contiguous(), scale.contiguous(), torch.tensor([rows, cols],
                                                                 dtype=torch.int64)


def int4_dequantize(packed: Any, scale: Any, shape: Any, dtype: Any) -> Any:
    import torch

    rows, cols = (int(x) for x in shape)
    words = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(INT4_PER_WORD, dtype=torch.int64) * 4
    q = ((words[..., None] >> shifts) & 0xF) - 8
    q = q.view(rows, -1)[:, :cols].float()
    group = cols // scale.shape[1]
    return (q.view(rows, -1, group) * scale.float()[..., None]).view(rows, cols).to(dtype)


def quantize_state(state: dict[str, Any], fmt: QuantFormat, dtype: Any
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(stored, twin)``: the checkpoint tensors in ``fmt``, and the bf16 (``dtype``) twin
    whose every weight is the exact dequantization of what is stored."""
    stored: dict[str, Any] = {}
    twin: dict[str, Any] = {}
    for name, t in state.items():
        if t.dim() == 2 and fmt.quantizes(name):
            base = name[: -len(".weight")]
            if fmt.kind == "fp8-block":
                q, s = fp8_quantize(t, fmt.block or FP8_BLOCK)
                stored[name], stored[base + ".weight_scale_inv"] = q, s
                twin[name] = fp8_dequantize(q, s, dtype, fmt.block or FP8_BLOCK)
            else:
                p, s, shp = int4_quantize(t, fmt.group or INT4_GROUP)
                stored[base + ".weight_packed"], stored[base + ".weight_scale"] = p, s
                stored[base + ".weight_shape"] = shp
                twin[name] = int4_dequantize(p, s, shp, dtype)
        else:
            stored[name] = t.to(dtype) if t.is_floating_point() else t
            twin[name] = stored[name]
    return stored, twin


def dequantize_state(stored: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """The dense weights a stored checkpoint stands for."""
    out: dict[str, Any] = {}
    for name, t in stored.items():
        if name.endswith((".weight_scale_inv", ".weight_scale", ".weight_shape")):
            continue
        if name.endswith(".weight_packed"):
            base = name[: -len(".weight_packed")]
            out[base + ".weight"] = int4_dequantize(t, stored[base + ".weight_scale"],
                                                    stored[base + ".weight_shape"], dtype)
        elif name.endswith(".weight") and name[:-7] + ".weight_scale_inv" in stored:
            out[name] = fp8_dequantize(t, stored[name[:-7] + ".weight_scale_inv"], dtype)
        else:
            out[name] = t
    return out
