"""A campaign on paper: what each verifier-side stage needs with each backend on N GPUs.

``harness check`` prints this for a spec with a ``plan:`` section (the verifier's shipped
``config.json`` and the GPUs: ``gpus: 8``, ``gpu_memory: [80GB, 141GB]``). For every stage
that runs the verifier (``hidden_states``, ``train --online``, ``verify``, ``generate
--backend local``) and each backend:

- **hf** (transformers, the verifier spread over the GPUs by a device map): the weights as
  transformers holds them (:mod:`pipeline.eagle3.hardware.quant_support`: FP8 as stored on a GPU of compute
  capability >= 8.9, INT4 decompressed to bf16), over the GPUs, plus one forward's
  activations and (generate, verify) transformers' KV cache, which for MLA is the
  decompressed keys and values of every head (:func:`pipeline.eagle3.hardware.memory_plan.kv_bytes_per_token_layer`);
- **vllm** (tensor parallel over the GPUs): the weights as stored, over the GPUs, plus the
  activations; vLLM gives the rest (``gpu_memory_utilization`` 0.9) to its KV cache, which
  for MLA keeps the compressed latent only. Only ``hidden_states`` (``--backend vllm``) and
  ``generate`` (``--backend openai`` against ``eagle3.serve``) have a vLLM backend.

Then the shard disk of offline training (:mod:`pipeline.eagle3.plan.disk_estimate`) and the hours at the
measured rate below. Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.eagle3.hardware.memory_plan import (
    Workload,
    activation_bytes,
    kv_bytes_per_token_layer,
)
from pipeline.eagle3.hardware.placement import _size as parse_size
from pipeline.eagle3.hardware.quant_formats import QuantFormat, quant_format, stored_weight_bytes
from pipeline.eagle3.model.verifier_shapes import (
    active_params_per_token,
    text_config,
    weight_shapes,
)
from pipeline.eagle3.plan.disk_estimate import DiskEstimate, _size
from pipeline.eagle3.plan.disk_estimate import estimates as disk_estimates
from pipeline.eagle3.plan.stage_costs import RunCosts, built_config, run_costs
from pipeline.errors import ActionError

# Measured: one Kimi-K2-shaped layer (hidden 7168, MLA q/kv ranks 1536/512, 384 routed
# experts top-8 plus a shared one, random bf16 weights, B=4 x S=2048) in transformers 5.17
# on one H200: 177.6k tokens/s with the default grouped_mm experts (383 TFLOP/s), 44.5k with
# eager experts. Source: issue 23's measurement of 2026-12-02, recorded in
# docs/PERFORMANCE.md ("The rate harness check's campaign plan uses"). A model's rate on one
# GPU is this scaled by the weights a token multiplies with (this layer's over the model's):
# exact for Kimi-shaped layers, an underestimate for small dense ones (attention's own FLOPs
# are left out: 91k predicted against 199k measured at the Llama-3.2-1B shape).
KIMI_LAYER_TOKENS_PER_S = 177_600
KIMI_K2_LAYER = dict(hidden_size=7168, num_hidden_layers=1, vocab_size=163840,
                     intermediate_size=18432, moe_intermediate_size=2048,
                     num_attention_heads=64, q_lora_rank=1536, kv_lora_rank=512,
                     qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                     n_routed_experts=384, num_experts_per_tok=8, n_shared_experts=1,
                     first_k_dense_replace=0)
# A device map runs one GPU's layers at a time: the model's rate is one GPU's. Tensor
# parallelism keeps every GPU busy: at most N times that (the all-reduces not counted; the
# vLLM backend's own rate at this shape is not measured yet, so its hours are a bound).
VLLM_UTILIZATION = 0.9      # vLLM's default gpu_memory_utilization
GENERATE_PROMPT_TOKENS = 512  # the prompt part of a generate sequence, for its KV cache

STAGES = {"eagle3.hidden_states": "hidden_states", "eagle3.train": "train --online",
          "eagle3.verify": "verify", "eagle3.generate": "generate"}


@dataclass
class BackendNeed:
    backend: str
    weights: int | None          # per GPU (None: no such backend for the stage)
    activations: int = 0
    kv: int = 0
    capacity: int = 0
    tokens_per_s: float | None = None
    note: str = ""

    @property
    def total(self) -> int:
        return (self.weights or 0) + self.activations + self.kv

    @property
    def fits(self) -> bool:
        return self.weights is not None and self.total <= self.capacity


@dataclass
class StageNeed:
    stage: str
    what: str
    gpu_bytes: int
    needs: list[BackendNeed]
    disk: DiskEstimate | None = None
    tokens: int | None = None
    passes: int = 1

    def hours(self, need: BackendNeed) -> float | None:
        if need.tokens_per_s is None or self.tokens is None or not self.what.startswith(
                ("hidden_states", "train")):
            return None
        return self.tokens * self.passes / need.tokens_per_s / 3600


@dataclass
class CampaignPlan:
    config_path: Path
    arch: str
    params: int
    fmt: QuantFormat | None
    stored: int
    dense: int
    gpus: int
    sizes: list[int]
    stages: list[StageNeed] = field(default_factory=list)
    #: a built verifier's training, servers, disk and time (:mod:`pipeline.eagle3.plan.stage_costs`)
    costs: RunCosts | None = None

    def holds(self, backend: str, size: int) -> bool:
        """Whether ``backend`` holds every verifier-side stage that it has on GPUs of
        ``size``."""
        found = [n for s in self.stages if s.gpu_bytes == size for n in s.needs
                 if n.backend == backend and n.weights is not None]
        return bool(found) and all(n.fits for n in found)

    def lines(self) -> list[str]:
        fmt = self.fmt.label if self.fmt else "bf16"
        out = [f"plan: verifier {self.config_path} ({self.arch}, {self.params / 1e9:.1f}B "
               f"params, {fmt}): {_size(self.stored)} stored, {_size(self.dense)} in bf16; "
               f"on {self.gpus} GPUs of " + " / ".join(_size(s) for s in self.sizes)]
        for st in self.stages:
            for n in st.needs:
                head = f"plan: {st.stage} ({st.what}) {n.backend:<4} x {_size(st.gpu_bytes)}:"
                if n.weights is None:
                    out.append(f"{head} no {n.backend} backend ({n.note})")
                    continue
                kv = f" + KV {_size(n.kv)}" if n.kv else ""
                verdict = "fits" if n.fits else "DOES NOT FIT"
                hours = st.hours(n)
                rate = (f"; {hours:.1f} h at {n.tokens_per_s / 1e3:.1f}k tokens/s"
                        if hours is not None else "")
                out.append(f"{head} per GPU weights {_size(n.weights)} + activations "
                           f"{_size(n.activations)}{kv} = {_size(n.total)} of "
                           f"{_size(n.capacity)}: {verdict}{rate} ({n.note})")
            if st.disk is not None and st.disk.bytes is not None and st.gpu_bytes == \
                    self.sizes[-1]:
                out.append(f"plan: {st.stage}: shards for offline training "
                           f"{'at most ' if not st.disk.exact else ''}"
                           f"{_size(st.disk.bytes)}")
        for size in self.sizes:
            ok = [b for b in ("hf", "vllm") if self.holds(b, size)]
            out.append(f"plan: on {self.gpus} x {_size(size)}: "
                       + (f"{' and '.join(ok)} can hold the verifier" if ok else
                          "neither backend holds the verifier")
                       + ("" if "hf" in ok else
                          "; the hf backend cannot: use --backend vllm"))
        return out + (self.costs.lines() if self.costs is not None else [])

    def to_json(self) -> dict[str, Any]:
        return {"verifier_config": str(self.config_path), "arch": self.arch,
                "params": self.params, "format": self.fmt.label if self.fmt else None,
                "stored_bytes": self.stored, "bf16_bytes": self.dense, "gpus": self.gpus,
                "gpu_memory": self.sizes,
                "holds": {str(s): {b: self.holds(b, s) for b in ("hf", "vllm")}
                          for s in self.sizes},
                "stages": [{"stage": s.stage, "what": s.what, "gpu_memory": s.gpu_bytes,
                            "shard_bytes": s.disk.bytes if s.disk else None,
                            "backends": [{"backend": n.backend, "weights": n.weights,
                                          "activations": n.activations, "kv": n.kv,
                                          "total": n.total, "fits": n.fits,
                                          "tokens_per_s": n.tokens_per_s,
                                          "hours": s.hours(n), "note": n.note}
                                         for n in s.needs]} for s in self.stages],
                "stage_costs": self.costs.to_json() if self.costs is not None else None}


def one_gpu_tokens_per_s(cfg: dict[str, Any]) -> float:
    """The measured layer rate scaled to ``cfg``'s whole body on one H200."""
    return KIMI_LAYER_TOKENS_PER_S * active_params_per_token(KIMI_K2_LAYER) / max(
        1, active_params_per_token(cfg))


def weight_bytes(cfg: dict[str, Any], fmt: QuantFormat | None, held: str) -> int:
    """Bytes of the weights: ``stored``; ``hf`` (as transformers holds them on a GPU of
    compute capability >= 8.9); ``dense`` (bf16)."""
    total = 0
    keep = fmt if held == "stored" or (held == "hf" and fmt is not None and
                                       fmt.kind == "fp8-block") else None
    for name, shape in weight_shapes(cfg):
        total += stored_weight_bytes(keep, name, shape, 2)
    return total


def plan(spec: Any) -> CampaignPlan | None:
    """The campaign plan of a spec with a ``plan:`` section; None without one."""
    p = getattr(spec, "plan", None)
    if p is None:
        return None
    base = spec.path.parent if spec.path is not None else Path.cwd()
    if p.verifier_config is None:
        # the verifier the spec builds: its shape is in the build stage's `with:`
        raw, built = built_config(spec)
        path = Path(f"(built by stage {built.name})")
    else:
        path = (base / p.verifier_config)
        raw = _read_config(path)
    cfg = text_config(raw)
    fmt = quant_format(raw)
    if fmt is not None and fmt.kind == "other":
        raise ActionError(f"the plan cannot count {fmt.label}: FP8 block-scaled and INT4 "
                          "pack-quantized only", where=str(path))
    shapes = weight_shapes(cfg)
    params = sum(_numel(s) for _, s in shapes)
    sizes = [parse_size(v, "plan.gpu_memory") for v in p.gpu_memory]
    cp = CampaignPlan(path, str(cfg.get("model_type", "?")), params, fmt,
                      weight_bytes(cfg, fmt, "stored"), weight_bytes(cfg, fmt, "dense"),
                      p.gpus, sizes)
    if p.verifier_config is None:
        cp.costs = run_costs(spec, cfg, params, sizes[-1], p.gpu)
    disks = {d.stage: d for d in disk_estimates(spec)}
    hf_w, vllm_w = weight_bytes(cfg, fmt, "hf"), cp.stored
    one = one_gpu_tokens_per_s(cfg)
    layers, h = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
    for st in spec.order():
        what = STAGES.get(st.action or "")
        par = st.params
        if what is None:
            continue
        if st.action == "eagle3.train" and not par.get("online"):
            what = "train, if --online"  # offline reads shards; online runs the verifier
        elif st.action == "eagle3.generate" and par.get("backend", "local") != "local":
            what = f"generate, now --backend {par.get('backend')}"
        work, kv_tokens = _workload(st.action, par)
        act = activation_bytes(cfg, work, 2)
        kv_hf = kv_bytes_per_token_layer(cfg, 2) * layers * work.batch * kv_tokens
        disk = disks.get(st.name)
        d = DiskEstimate(disk.stage, disk.online, disk.tokens, disk.exact, h, 2,
                         disk.how) if disk is not None else None
        tokens = d.tokens if d is not None and d.tokens else next(
            (x.tokens for x in disks.values() if x.tokens), None)
        passes = int(par.get("epochs") or 1) if st.action == "eagle3.train" else 1
        for size in sizes:
            hf = BackendNeed("hf", hf_w // p.gpus, act, kv_hf // p.gpus, size, one,
                             _hf_note(fmt, p.gpus))
            if st.action == "eagle3.hidden_states":
                vl = BackendNeed("vllm", vllm_w // p.gpus, act, 0,
                                 int(size * VLLM_UTILIZATION), one * p.gpus,
                                 f"tensor parallel {p.gpus}, weights as stored; rate a bound: "
                                 f"{p.gpus} x one GPU's")
            elif st.action == "eagle3.generate":
                vl = BackendNeed("vllm", vllm_w // p.gpus, act, 0,
                                 int(size * VLLM_UTILIZATION), None,
                                 "eagle3.serve with tensor parallel, then generate "
                                 "--backend openai; KV in vLLM's share")
            else:
                vl = BackendNeed("vllm", None, note=(
                    "extract with hidden_states --backend vllm, then train offline"
                    if st.action == "eagle3.train" else "its checks run the verifier in "
                    "transformers; eagle3.benchmark measures the drafter in vLLM"))
            cp.stages.append(StageNeed(st.name, what, size, [hf, vl], d, tokens, passes))
    return cp


def _read_config(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ActionError(f"cannot read the plan's verifier config ({exc.strerror})",
                          where=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ActionError(f"the plan's verifier config is not JSON ({exc.msg})",
                          where=str(path)) from None


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def _workload(action: str, par: dict[str, Any]) -> tuple[Workload, int]:
    """One forward's batch as the stage's parameters (or defaults) make it, and the KV
    tokens per sequence it keeps."""
    if action == "eagle3.hidden_states":
        return Workload(1, int(par.get("batch_tokens") or 16384)), 0
    if action == "eagle3.train":
        return Workload(1, int(par.get("batch_tokens") or 16384)), 0
    if action == "eagle3.generate":
        batch = int(par.get("batch_size") or 32)
        seq = GENERATE_PROMPT_TOKENS + int(par.get("max_new_tokens") or 256)
        return Workload(batch, seq, kv_tokens=seq), seq
    seq = GENERATE_PROMPT_TOKENS + int(par.get("max_new_tokens") or 256)
    return Workload(1, seq, kv_tokens=seq), seq


def _hf_note(fmt: QuantFormat | None, gpus: int) -> str:
    spread = f"device map over {gpus} GPUs, one at a time"
    if fmt is None:
        return spread
    if fmt.kind == "fp8-block":
        return f"{spread}; FP8 kept as stored (compute capability >= 8.9)"
    return f"{spread}; INT4 decompressed to bf16 by compressed-tensors"

