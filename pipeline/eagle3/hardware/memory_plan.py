"""The memory plan of a placed verifier, and the loading that enforces it.

Before anything is loaded, :func:`memory_plan` says what each device will hold: the weights
by dtype (exact, counted on the meta-device model), the activations of one forward at the
stage's batch and the KV cache (estimates, formulas in docs/eagle3.md), against the memory
the device has free. :func:`load_placed` prints it, refuses a plan that does not fit with
one ActionError naming the numbers, then loads the verifier as :mod:`pipeline.eagle3.hardware.placement` says.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.eagle3.common import dtype_name, verifier_config
from pipeline.eagle3.hardware.distributed import world_size
from pipeline.eagle3.hardware.placement import (
    Placement,
    accelerate_key,
    device_label,
    gib,
    input_device_of,
    keep_on_first_device,
    meta_model,
    resolve_device_map,
    tp_load_kwargs,
    tp_sharded_patterns,
)
from pipeline.eagle3.hardware.quant_formats import quant_format, stored_parts
from pipeline.eagle3.hardware.quant_support import DENSE, VLLM_HINT, Holding, finish_load, holding
from pipeline.errors import ActionError


@dataclass
class Workload:
    """What one forward of the stage holds besides the weights."""

    batch: int                  # sequences per forward
    seq: int                    # padded tokens per sequence
    kv_tokens: int = 0          # tokens per sequence kept in a KV cache (0: no cache)
    logits_rows: int = 0        # rows per sequence that go through lm_head (0: body only)
    captured: int = 0           # hidden states kept per token (aux layers + last)

    def describe(self) -> str:
        parts = [f"batch {self.batch} x {self.seq} tokens"]
        if self.kv_tokens:
            parts.append(f"KV for {self.kv_tokens} tokens/sequence")
        return ", ".join(parts)


@dataclass
class DevicePlan:
    device: str
    weights: dict[str, int] = field(default_factory=dict)  # dtype -> bytes
    activations: int = 0
    kv: int = 0
    capacity: int | None = None
    capacity_of: str = "free"
    layers: list[int] = field(default_factory=list)
    budget: int | None = None  # --max-memory for this device (a bound on its weights)

    @property
    def weight_bytes(self) -> int:
        return sum(self.weights.values())

    @property
    def total(self) -> int:
        return self.weight_bytes + self.activations + self.kv

    @property
    def fits(self) -> bool:
        return self.capacity is None or self.total <= self.capacity

    def line(self) -> str:
        layers = _ranges(self.layers) if self.layers else "-"
        by_dtype = ", ".join(f"{k} {gib(v)}" for k, v in sorted(self.weights.items()))
        cap = (f"of {gib(self.capacity)} {self.capacity_of}" if self.capacity is not None
               else "")
        return (f"{self.device:<7} layers {layers:<10} weights {gib(self.weight_bytes)}"
                f" ({by_dtype or 'none'}) + activations {gib(self.activations)} + KV "
                f"{gib(self.kv)} = {gib(self.total)} {cap}"
                + ("" if self.fits else "  DOES NOT FIT"))

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "layers": self.layers, "weights": self.weights,
                "activations": self.activations, "kv": self.kv, "total": self.total,
                "capacity": self.capacity, "capacity_of": self.capacity_of,
                "fits": self.fits}


@dataclass
class MemoryPlan:
    placement: str
    dtype: str
    params: int
    workload: str
    devices: list[DevicePlan]
    device_map: dict[str, Any] | None = None
    kept: list[str] = field(default_factory=list)  # moved to the first device on purpose
    quant: str = ""             # the checkpoint's format, when quantized
    held_as: str = ""           # how transformers holds it (dequantized, or as stored)
    dense_held: bool = True     # transformers holds bf16/fp32 weights, not the stored ones
    stored: int = 0             # the weights' bytes as the checkpoint stores them

    @property
    def fits(self) -> bool:
        return all(d.fits for d in self.devices)

    def lines(self) -> list[str]:
        head = (f"[memory] verifier {self.params / 1e6:.1f}M params in {self.dtype}, "
                f"{self.placement}, {self.workload}:")
        lines = [head]
        if self.quant:
            lines.append(f"[memory]   stored as {self.quant}: {gib(self.stored)}; "
                         f"{self.held_as}")
        lines += [f"[memory]   {d.line()}" for d in self.devices]
        if self.kept:
            lines.append(f"[memory]   kept on the first device (their weights are read "
                         f"directly): {', '.join(self.kept)}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"placement": self.placement, "dtype": self.dtype, "params": self.params,
                "workload": self.workload, "fits": self.fits, "quant": self.quant or None,
                "held_as": self.held_as or None, "stored_bytes": self.stored,
                "devices": [d.to_json() for d in self.devices]}

    def error(self) -> ActionError:
        bad = [d for d in self.devices if not d.fits]
        parts = [f"{d.device} needs {gib(d.total)} (weights {gib(d.weight_bytes)} + "
                 f"activations {gib(d.activations)} + KV {gib(d.kv)}) but has "
                 f"{gib(d.capacity)} {d.capacity_of}" for d in bad]
        if self.quant and self.dense_held:
            return ActionError(
                "memory plan does not fit: " + "; ".join(parts) + f" ({self.quant}: "
                f"{self.held_as}; as stored it takes {gib(self.stored)})", hint=VLLM_HINT)
        return ActionError(
            "memory plan does not fit: " + "; ".join(parts),
            hint="lower the batch (--batch-tokens/--batch-size), or spread the verifier "
                 "with --device-map/--max-memory (a smaller --max-memory on a device moves "
                 "layers to the next one)")


def _ranges(xs: list[int]) -> str:
    xs = sorted(xs)
    out, start, prev = [], xs[0], xs[0]
    for x in [*xs[1:], None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(out)


def _layer_of(name: str) -> int | None:
    m = re.search(r"(?:^|\.)layers\.(\d+)(?:\.|$)", name)
    return int(m.group(1)) if m else None


def kv_bytes_per_token_layer(cfg: dict[str, Any], itemsize: int) -> int:
    """Bytes one token adds to one layer's Hugging Face KV cache.

    MLA (DeepSeek-V3, Kimi-K2) in transformers caches the decompressed keys and values of
    every head: ``heads * (qk_nope + qk_rope + v_head_dim)``, not the compressed latent a
    serving engine keeps. GQA models cache ``2 * kv_heads * head_dim``.
    """
    heads = int(cfg.get("num_attention_heads") or 1)
    if cfg.get("kv_lora_rank"):
        qk = int(cfg.get("qk_nope_head_dim", 0)) + int(cfg.get("qk_rope_head_dim", 0))
        return heads * (qk + int(cfg.get("v_head_dim") or qk)) * itemsize
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    return 2 * kv_heads * head_dim * itemsize


def activation_bytes(cfg: dict[str, Any], work: Workload, itemsize: int) -> int:
    """The working set of one decoder layer's forward over the batch (only one layer's
    intermediates are alive at a time under no_grad): residual, normed input, q/k/v and the
    attention output (each ~one hidden state wide), the MLP's gate/up/product (MoE: the
    routed experts a token visits plus the shared ones)."""
    tokens = work.batch * work.seq
    h = int(cfg["hidden_size"])
    heads = int(cfg.get("num_attention_heads") or 1)
    inter = int(cfg.get("intermediate_size") or 4 * h)
    if cfg.get("moe_intermediate_size"):
        routed = int(cfg.get("num_experts_per_tok") or 1)
        shared = int(cfg.get("n_shared_experts") or 0)
        inter = max(inter, (routed + shared) * int(cfg["moe_intermediate_size"]))
    if cfg.get("kv_lora_rank"):
        qk = int(cfg.get("qk_nope_head_dim", 0)) + int(cfg.get("qk_rope_head_dim", 0))
        attn = heads * (2 * qk + 2 * int(cfg.get("v_head_dim") or qk))
    else:
        hd = int(cfg.get("head_dim") or h // heads)
        kvh = int(cfg.get("num_key_value_heads") or heads)
        attn = (2 * heads + 2 * kvh) * hd
    return tokens * (3 * h + attn + 3 * inter) * itemsize


def _capacity(device: Any, placement: Placement) -> tuple[int | None, str]:
    import torch

    if device == "disk":
        folder = placement.offload_folder
        if folder is None:
            return 0, "(no --offload-folder)"
        folder.mkdir(parents=True, exist_ok=True)
        return shutil.disk_usage(folder).free, f"free in {folder}"
    if device == "cpu":
        return _cpu_available(), "available"
    index = int(device)
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return 0, "(no such GPU)"
    free, _total = torch.cuda.mem_get_info(index)
    return int(free), "free"


def _cpu_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError):
        return None


def verifier_holding(verifier: Path, placement: Placement) -> Holding:
    """How transformers will hold the verifier's (maybe quantized) weights on the stage's
    main device; the one-line refusal where it cannot run the format there."""
    return holding(quant_format(verifier_config(verifier)), placement.device)


def memory_plan(verifier: Path, dtype: Any, placement: Placement, work: Workload,
                model: Any | None = None, keep: list[str] | None = None,
                hold: Holding | None = None) -> MemoryPlan:
    """What each device will hold. ``model``: the meta-device model, if already built;
    ``keep``: modules that must stay on the map's first device; ``hold``: how the weights
    are held (:func:`verifier_holding`, asked here when not given)."""
    cfg = verifier_config(verifier)
    hold = hold if hold is not None else verifier_holding(verifier, placement)
    model = model if model is not None else meta_model(verifier, dtype)
    itemsize = dtype.itemsize
    # Parameters and buffers by name, once each (tied weights share one parameter).
    seen: set[int] = set()
    tensors: list[tuple[str, Any]] = []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            tensors.append((name, t))
    params = sum(t.numel() for n, t in model.named_parameters())
    # Bytes by held dtype per tensor: a quantized checkpoint's projections as stored (FP8
    # values plus block scales) where transformers keeps them so, else dense.
    held = {name: hold.bytes_by_dtype(name, tuple(t.shape), t.element_size(),
                                      dtype_name(t.dtype)) for name, t in tensors}
    stored = sum(sum(stored_parts(hold.fmt, name, tuple(t.shape), 2).values())
                 for name, t in tensors) if hold.fmt is not None else 0

    device_map: dict[str, Any] | None = None
    moved: list[str] = []
    if placement.spread:
        device_map = resolve_device_map(model, placement)
        if keep:
            device_map, moved = keep_on_first_device(device_map, model, keep)

        def where(name: str) -> Any:
            best, key = -1, None
            for prefix, dev in device_map.items():  # type: ignore[union-attr]
                if (prefix == "" or name == prefix or name.startswith(prefix + ".")) \
                        and len(prefix) > best:
                    best, key = len(prefix), dev
            return key
    else:
        main = accelerate_key(placement.device)

        def where(name: str) -> Any:
            return main

    plans: dict[Any, DevicePlan] = {}
    world = world_size() if placement.tp else 1
    sharded = tp_sharded_patterns(model) if placement.tp else []
    for name, _t in tensors:
        dev = where(name)
        dp = plans.setdefault(dev, DevicePlan(device_label(dev)))
        split = world if sharded and any(p.fullmatch(name.rsplit(".", 1)[0]) or
                                         p.fullmatch(name) for p in sharded) else 1
        for key, nbytes in held[name].items():
            dp.weights[key] = dp.weights.get(key, 0) + nbytes // split
        layer = _layer_of(name)
        if layer is not None and layer not in dp.layers:
            dp.layers.append(layer)

    act = activation_bytes(cfg, work, itemsize)
    kv_layer = kv_bytes_per_token_layer(cfg, itemsize) * work.batch * work.kv_tokens
    h, vocab = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    tokens = work.batch * work.seq
    # accelerate's dispatch: with a GPU in the map, modules on "cpu" or "disk" are offloaded
    # (their weights stay there and stream to the first GPU for each forward, where they
    # compute); without one, "disk" modules compute on the CPU.
    gpus = sorted(d for d in plans if isinstance(d, int))
    main_exec: Any = gpus[0] if gpus else "cpu"
    offloaded = {"cpu", "disk"} if gpus else {"disk"}

    def exec_of(dev: Any) -> Any:
        return main_exec if dev in offloaded else dev

    for dev in list(plans):
        plans.setdefault(exec_of(dev), DevicePlan(device_label(exec_of(dev))))
    sizes: dict[Any, int] = {}
    for dev, dp in list(plans.items()):
        if not dp.layers:
            continue
        host = plans[exec_of(dev)]
        host.kv += kv_layer * len(dp.layers)
        if dev in offloaded:  # one offloaded layer's weights at a time, on its exec device
            biggest = max(_layer_sizes(tensors, where, dev, held).values(), default=0)
            sizes[exec_of(dev)] = max(sizes.get(exec_of(dev), 0), biggest)
    for dev in {exec_of(d) for d, dp in plans.items() if dp.layers}:
        plans[dev].activations += act + sizes.get(dev, 0)
    if work.logits_rows:
        plans[exec_of(where("lm_head.weight"))].activations += (
            work.batch * work.logits_rows * vocab * (itemsize + 4))
    if work.captured:  # the aux states and last, gathered where the inputs are
        plans[exec_of(where("model.embed_tokens.weight"))].activations += (
            2 * work.captured * tokens * h * itemsize)
    for dev, dp in plans.items():
        dp.layers.sort()
        dp.capacity, dp.capacity_of = _capacity(dev, placement)
        if placement.max_memory and dev in placement.max_memory:
            dp.budget = placement.max_memory[dev]
    order = sorted(plans, key=lambda d: (isinstance(d, str), d == "disk", str(d)))
    return MemoryPlan(placement=placement.describe(), dtype=dtype_name(next(
        (t.dtype for _, t in model.named_parameters() if t.is_floating_point()), dtype)),
        params=params, workload=work.describe(), devices=[plans[d] for d in order],
        device_map=device_map, kept=moved, quant=hold.fmt.label if hold.fmt else "",
        held_as=hold.why, dense_held=hold.mode == DENSE, stored=stored)


def _layer_sizes(tensors, where, dev, held) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for name, _t in tensors:
        layer = _layer_of(name)
        if layer is not None and where(name) == dev:
            sizes[layer] = sizes.get(layer, 0) + sum(held[name].values())
    return sizes


# -- loading ----------------------------------------------------------------------------------

@dataclass
class Placed:
    model: Any
    input_device: Any      # where input ids go (the embedding's device)
    plan: MemoryPlan
    placement: Placement


def plan_or_fail(verifier: Path, dtype: Any, placement: Placement, work: Workload,
                 log: Any, keep: list[str] | None = None) -> tuple[MemoryPlan, Any]:
    """Print the memory plan; raise its one-line error when it does not fit (or, before
    anything is built, when transformers cannot run the checkpoint's format here)."""
    hold = verifier_holding(verifier, placement)
    model = meta_model(verifier, dtype)
    plan = memory_plan(verifier, dtype, placement, work, model=model, keep=keep, hold=hold)
    if placement.writes:
        for line in plan.lines():
            log(line)
    disk = next((d for d in plan.devices if d.device == "disk"), None)
    if disk is not None and placement.offload_folder is None:
        raise ActionError(
            f"the verifier does not fit the devices: {gib(disk.weight_bytes)} of its "
            f"weights (layers {_ranges(disk.layers) if disk.layers else '-'}) would go to "
            "disk", hint='list every device to use in --max-memory (e.g. {"0": "60GiB", '
                         '"cpu": "200GiB"}), raise its sizes, or give --offload-folder to run '
                         "those layers from disk (slow)")
    if not plan.fits:
        raise plan.error()
    return plan, model


def load_placed(verifier: Path, dtype: Any, placement: Placement, work: Workload,
                log: Any, keep: list[str] | None = None) -> Placed:
    """Plan, check, then load the verifier for inference as ``placement`` says. ``keep``:
    modules whose weights the caller reads directly (never offloaded)."""
    from transformers import AutoModelForCausalLM

    from pipeline.eagle3.common import check_verifier_weights, load_verifier

    plan, _meta = plan_or_fail(verifier, dtype, placement, work, log, keep=keep)
    # A quantized checkpoint loads straight onto its GPU: transformers keeps FP8 as stored
    # only when it places the weights itself.
    direct = bool(plan.quant) and getattr(placement.device, "type", "") == "cuda"
    if not placement.spread and not placement.tp and not direct:
        model = finish_load(load_verifier(verifier, placement.device, dtype))
        return Placed(model, placement.device, plan, placement)
    check_verifier_weights(verifier)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if placement.tp:
        kwargs.update(tp_load_kwargs())
    elif not placement.spread:
        kwargs["device_map"] = {"": accelerate_key(placement.device)}
    else:
        kwargs["device_map"] = plan.device_map
        if placement.offload_folder is not None:
            kwargs["offload_folder"] = str(placement.offload_folder)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(verifier), **kwargs)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ActionError(f"cannot load the verifier ({str(exc).splitlines()[0][:300]})",
                          where=str(verifier)) from None
    model = finish_load(model).eval()
    if placement.tp or not placement.spread:
        return Placed(model, placement.device, plan, placement)
    return Placed(model, input_device_of(plan.device_map or {}, placement.device), plan,
                  placement)




def measured_peaks() -> dict[str, float]:
    """GiB each CUDA device of this process held at its peak (torch's allocator), to set
    beside the plan: an empty dict on a machine without CUDA or before any allocation."""
    import torch

    if not torch.cuda.is_available():
        return {}
    peaks = {f"cuda:{i}": torch.cuda.max_memory_allocated(i) / 2 ** 30
             for i in range(torch.cuda.device_count())}
    return {d: round(g, 3) for d, g in peaks.items() if g > 0}


def peaks_line(peaks: dict[str, float], plan: MemoryPlan) -> str:
    """``peak memory: cuda:0 12.1 GiB (plan 11.8), cuda:1 11.9 GiB (plan 11.8)``."""
    planned = {d.device: d for d in plan.devices}

    def one(dev: str, got: float) -> str:
        p = planned.get(dev) or planned.get(dev.removeprefix("cuda:"))
        want = f" (plan {gib(p.total)})" if p is not None else ""
        return f"{dev} {got:.2f} GiB{want}"
    return "peak memory: " + ", ".join(one(d, g) for d, g in peaks.items())
