"""What transformers holds of a quantized verifier on a device, or why it cannot run it.

Measured with transformers 5.24 and compressed-tensors 0.20 on the tiny checkpoints of
:mod:`pipeline.eagle3.hardware.quantize_checkpoint` (tests/eagle3/test_quantized_verifier.py):

- FP8 block-scaled on the CPU, or on a GPU below compute capability 8.9: transformers
  dequantizes every weight to bf16 at load (it warns and goes on), so the CPU holds bf16;
- FP8 block-scaled on a GPU of compute capability >= 8.9: the weights stay e4m3 with their
  fp32 block scales, and every projection runs through the finegrained-fp8 Triton kernel
  (``kernels-community/finegrained-fp8``, fetched by the ``kernels`` package) or DeepGEMM.
  Without that kernel the first forward fails, so the stage refuses before loading;
- INT4 pack-quantized: the checkpoint loads packed (int32) and compressed-tensors
  decompresses every quantized linear to bf16 at the first forward; routed experts, which
  transformers 5 fuses into one 3-D tensor (no ``Linear`` for compressed-tensors to wrap),
  are dequantized at load. Either way the device holds bf16 while it computes;
- any other ``quant_method``: not run here.

A serving engine (vLLM) keeps both formats as stored and has kernels for them, so every
refusal points to ``--backend vllm``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pipeline.eagle3.hardware.quant_formats import QuantFormat, stored_parts
from pipeline.errors import ActionError

STORED = "stored"          # transformers holds the weights as the checkpoint stores them
DENSE = "dense"            # transformers holds (or, at the first forward, makes) bf16 weights

VLLM_HINT = ("run the verifier in vLLM, which keeps the format as stored "
             "(hidden_states --backend vllm)")


@dataclass(frozen=True)
class Holding:
    """How transformers will hold a verifier's weights on a device."""

    fmt: QuantFormat | None
    mode: str               # STORED or DENSE
    why: str                # shown in the memory plan

    def bytes_by_dtype(self, name: str, shape: tuple[int, ...], itemsize: int,
                       dense_dtype: str) -> dict[str, int]:
        """Bytes of one model parameter (meta-model name and shape) by the dtype held."""
        dense = {dense_dtype: math.prod(shape) * itemsize}
        if self.fmt is None or not self.fmt.quantizes(name):
            return dense
        if self.mode == STORED:
            return stored_parts(self.fmt, name, shape, itemsize, dense_dtype)
        if self.fmt.kind == "int4-pack" and name.endswith(".weight"):
            # a decompressed compressed-tensors Linear keeps its group scales and shape
            parts = stored_parts(self.fmt, name, shape, itemsize, dense_dtype)
            parts.pop("int32", None)
            for k, v in parts.items():
                dense[k] = dense.get(k, 0) + v
        return dense


def _fp8_kernel_problem() -> str | None:
    """Why transformers' FP8 kernel cannot run here, or None. May fetch it (the ``kernels``
    package caches it), so it is called only for an FP8 checkpoint on a capable GPU."""
    try:
        from transformers.integrations import finegrained_fp8 as f8
    except ImportError as exc:
        return f"this transformers has no finegrained FP8 integration ({exc})"
    loader = getattr(f8, "load_finegrained_fp8_kernel", None)
    if loader is None:  # older releases ship the Triton kernel in the package itself
        return None
    try:
        loader()
    except Exception as exc:  # any failure to get the kernel means no FP8 forward
        return f"its finegrained-fp8 kernel is not available ({str(exc).splitlines()[0][:160]})"
    return None


def holding(fmt: QuantFormat | None, device: Any) -> Holding:
    """How transformers holds ``fmt`` on ``device`` (a torch.device); raises the one-line
    refusal where it cannot run it."""
    kind = getattr(device, "type", str(device))
    where = str(device)
    if fmt is None:
        return Holding(None, DENSE, "")
    if fmt.kind == "fp8-block":
        if kind == "cuda":
            import torch

            index = getattr(device, "index", None) or 0
            major, minor = torch.cuda.get_device_capability(index)
            if (major, minor) >= (8, 9):
                problem = _fp8_kernel_problem()
                if problem:
                    raise refusal(fmt, where, problem)
                return Holding(fmt, STORED, "transformers keeps the e4m3 weights and fp32 block scales (FP8 kernels)")
            return Holding(fmt, DENSE, f"transformers dequantizes FP8 at load on "
                                       f"compute capability {major}.{minor} (< 8.9)")
        if kind == "cpu":
            return Holding(fmt, DENSE, "transformers dequantizes FP8 at load on the CPU")
        raise refusal(fmt, where, f"transformers runs FP8 on CUDA GPUs and the CPU, not {kind}")
    if fmt.kind == "int4-pack":
        try:
            import compressed_tensors  # noqa: F401
        except ImportError:
            raise refusal(fmt, where, "transformers needs the compressed-tensors package "
                                      "(pip install compressed-tensors, in the eagle3 extra)"
                          ) from None
        return Holding(fmt, DENSE, "compressed-tensors decompresses INT4 at the first forward "
                                   "(routed experts at load)")
    raise refusal(fmt, where, "the transformers path runs FP8 block-scaled and INT4 "
                              "pack-quantized checkpoints only")


def refusal(fmt: QuantFormat, where: str, why: str) -> ActionError:
    return ActionError(f"transformers cannot run this {fmt.label} verifier on {where}: {why}",
                       hint=VLLM_HINT)


def finish_load(model: Any) -> Any:
    """Decompress a compressed-tensors model now instead of at its first forward.

    compressed-tensors decompresses from a forward pre-hook on the whole model, but the
    stages run its body (``model.model``) directly, which would find ``Linear`` modules
    without a ``weight``. The memory plan already counts the decompressed weights.
    """
    if getattr(model, "ct_decompress_hook", None) is None:
        return model
    compressor = getattr(getattr(model, "hf_quantizer", None), "compressor", None)
    if compressor is not None and hasattr(compressor, "decompress_model"):
        compressor.decompress_model(model)
    hook = getattr(model, "ct_decompress_hook", None)
    if hook is not None:  # older releases leave it: a one-token forward runs it
        import torch

        device = next(p.device for p in model.parameters())
        with torch.no_grad():
            model(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device))
    return model
