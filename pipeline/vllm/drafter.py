"""vLLM's own EAGLE-3 drafter, built on the CPU or the meta device, outside a GPU server.

:func:`vllm_configs` makes the ``VllmConfig`` vLLM itself would make for serving a verifier
with a drafter; :func:`build_drafter` instantiates the drafter class vLLM's registry names
for it, with the one part that needs vLLM's CUDA kernels (its paged ``Attention``) swapped
for plain causal attention; :func:`aux_ids` reads the aux layer ids vLLM took from the
drafter's config. :mod:`pipeline.vllm.probe`'s ``weights`` question feeds the model built
on the meta device the checkpoint's tensor names; ``tests/verify/vllm_side.py`` loads an
export into the CPU model and runs its forward.

Like the probe, this file runs in vLLM's interpreter, loaded by path
(:func:`pipeline.vllm.probe.vllm_drafter`): the standard library at module level, vLLM and
torch inside the functions. They raise what vLLM raises.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

__all__ = ["aux_ids", "build_drafter", "parallel_drafting", "vllm_configs"]


def parallel_drafting(drafter_dir: str) -> bool:
    """Whether vLLM serves this drafter with ``parallel_drafting``: a speculators config of
    type ``peagle`` (P-EAGLE), as ``eagle3.serve`` decides."""
    try:
        with open(os.path.join(drafter_dir, "config.json")) as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("speculators_model_type") == "peagle"


def vllm_configs(verifier_dir: str, drafter_dir: str, dtype: str = "float32",
                 num_speculative_tokens: int = 3, parallel: bool | None = None) -> Any:
    """vLLM's own ``VllmConfig`` for serving ``verifier_dir`` with the EAGLE-3 drafter
    ``drafter_dir`` on the CPU: eager, custom ops off (their native torch forms), no
    tokenizer; ``parallel_drafting`` for a P-EAGLE drafter (``parallel`` None: decided by
    :func:`parallel_drafting`). Raises what vLLM raises."""
    from vllm.config import (  # type: ignore[import-not-found]
        CompilationConfig,
        DeviceConfig,
        LoadConfig,
        ModelConfig,
        ParallelConfig,
        SpeculativeConfig,
        VllmConfig,
    )

    model_config = ModelConfig(model=verifier_dir, tokenizer=verifier_dir, dtype=dtype,
                               enforce_eager=True, skip_tokenizer_init=True)
    parallel_config = ParallelConfig()
    # only asked for when wanted: releases before parallel drafting have no such field
    extra = {"parallel_drafting": True} if (parallel_drafting(drafter_dir) if parallel is None
                                            else parallel) else {}
    speculative = SpeculativeConfig(method="eagle3", model=drafter_dir,
                                    num_speculative_tokens=num_speculative_tokens,
                                    target_model_config=model_config,
                                    target_parallel_config=parallel_config, **extra)
    return VllmConfig(model_config=model_config, speculative_config=speculative,
                      parallel_config=parallel_config, load_config=LoadConfig(),
                      device_config=DeviceConfig(device="cpu"),
                      compilation_config=CompilationConfig(custom_ops=["none"]))


class _Plain:
    """Builds the stand-in for vLLM's paged ``Attention`` (whose kernels need a GPU): plain
    causal attention over one sequence, ``[T, heads*hd]`` in and out, as vLLM's layer takes
    and returns them. Defined lazily so that this module imports without torch."""

    cls: Any = None

    @classmethod
    def get(cls) -> Any:
        if cls.cls is None:
            import torch
            import torch.nn.functional as F

            class PlainCausalAttention(torch.nn.Module):
                def __init__(self, num_heads: int, head_size: int, scale: float,
                             num_kv_heads: int | None = None, **_: Any) -> None:
                    super().__init__()
                    self.h, self.d, self.scale = num_heads, head_size, scale
                    self.kv = num_kv_heads or num_heads

                def forward(self, q: Any, k: Any, v: Any) -> Any:
                    t = q.shape[0]
                    q = q.view(t, self.h, self.d).transpose(0, 1)
                    k = k.view(t, self.kv, self.d).transpose(0, 1)
                    v = v.view(t, self.kv, self.d).transpose(0, 1)
                    k = k.repeat_interleave(self.h // self.kv, 0)
                    v = v.repeat_interleave(self.h // self.kv, 0)
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                       scale=self.scale)
                    return o.transpose(0, 1).reshape(t, self.h * self.d)

            cls.cls = PlainCausalAttention
        return cls.cls


def build_drafter(vllm_config: Any, device: str = "cpu") -> Any:
    """vLLM's EAGLE-3 drafter model class for ``vllm_config`` (``LlamaModel``'s attention
    swapped for :class:`_Plain`'s), built on ``device`` ("meta": shapes only) with a
    one-process gloo group. Returns ``(model, class name)``; raises what vLLM raises."""
    import torch
    from vllm.config import set_current_vllm_config  # type: ignore[import-not-found]
    from vllm.distributed import (  # type: ignore[import-not-found]
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )
    from vllm.model_executor.models import ModelRegistry  # type: ignore[import-not-found]
    from vllm.model_executor.models import llama as vllm_llama  # type: ignore[import-not-found]

    draft_cfg = vllm_config.speculative_config.draft_model_config
    archs = list(getattr(draft_cfg.hf_config, "architectures", None) or [])
    cls = None
    for arch in archs:
        model = getattr(ModelRegistry, "models", {}).get(arch)
        if model is not None:
            cls = model.load_model_cls()
            break
    if cls is None:
        raise RuntimeError(f"no registered vLLM model class for {archs}")
    vllm_llama.Attention = _Plain.get()
    with set_current_vllm_config(vllm_config):
        if not model_parallel_is_initialized():
            init = os.path.join(tempfile.mkdtemp(prefix="vllm-probe-"), "dist")
            init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                         distributed_init_method=f"file://{init}",
                                         backend="gloo")
            initialize_model_parallel(1, 1)
        dtype = vllm_config.model_config.dtype
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(device):
                model = cls(vllm_config=vllm_config, prefix="draft_model")
        finally:
            torch.set_default_dtype(previous)
    return model, f"{cls.__module__}.{cls.__name__}"


def aux_ids(config: Any) -> list[int] | None:
    hf = config.speculative_config.draft_model_config.hf_config
    ids = getattr(hf, "eagle_aux_hidden_state_layer_ids", None)
    if not ids:
        ids = (getattr(hf, "eagle_config", None) or {}).get("eagle_aux_hidden_state_layer_ids")
    return [int(i) for i in ids] if ids else None
