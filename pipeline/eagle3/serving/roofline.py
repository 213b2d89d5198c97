"""Is plain decoding bound by memory? The verifier's weight bytes over the measured TPOT.

At one request at a time, every decoding step reads every weight once, so weight bytes /
TPOT is the memory bandwidth the step achieved. Held against the GPU's datasheet peak
(:mod:`pipeline.eagle3.hardware.gpu_peaks`) it says where a step's time goes: near the peak the
step is bound by memory and a drafter's saved steps are what speculation buys; at a few
percent the step is fixed cost (scheduling, launches, sampling) and a served speedup
measures how the engine amortises that instead. Weight bytes are read from the
safetensors headers (no tensor is loaded), at the dtype the server runs them in. Standard library only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pipeline.eagle3.hardware.gpu_peaks import gpu_peak
from pipeline.vllm.model_files import safetensors_names

__all__ = ["describe", "roofline", "weight_bytes"]


_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
_FLOAT = {"F32", "F16", "BF16"}


def weight_bytes(model_dir: Path, dtype: str = "auto") -> int | None:
    """The bytes the server reads of every tensor in the directory's ``*.safetensors``
    files, or None when there are none or a header cannot be read. Floating-point tensors
    count at the served ``dtype``: ``auto`` is vLLM's rule (a float32 checkpoint is served
    in bfloat16 on GPUs that have it, others as stored); quantized tensors as stored."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    try:
        for path in files:
            for entry in safetensors_names(path).values():
                begin, end = entry["data_offsets"]
                stored = int(end) - int(begin)
                if entry["dtype"] not in _FLOAT:
                    total += stored
                    continue
                numel = math.prod(int(n) for n in entry["shape"])
                if dtype == "auto":
                    total += 2 * numel if entry["dtype"] == "F32" else stored
                else:
                    total += _SIZE[dtype] * numel
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return total


def roofline(weights: int, tpot_ms: float, gpu_name: str | None) -> dict[str, Any]:
    """The achieved bandwidth of a decoding step, and its share of the GPU's peak when
    the GPU's model is known."""
    bandwidth = weights / (tpot_ms / 1000.0)
    out: dict[str, Any] = {"weight_bytes": weights, "tpot_ms": round(tpot_ms, 4),
                           "bandwidth_gb_s": float(f"{bandwidth / 1e9:.4g}"), "gpu": gpu_name}
    peak = gpu_peak(gpu_name)
    if peak is not None:
        rate = peak.hbm_tb_s * 1e12
        out["gpu_model"] = peak.model
        out["peak_gb_s"] = round(rate / 1e9, 1)
        out["share_of_peak"] = float(f"{bandwidth / rate:.4g}")
        out["weights_floor_ms"] = round(weights / rate * 1000.0, 4)
    return out


def describe(r: dict[str, Any]) -> str:
    """One line for the log and the summary."""
    line = (f"roofline (plain decoding, c=1): {r['weight_bytes'] / 1e6:,.1f} MB of weights "
            f"/ TPOT p50 {r['tpot_ms']:.3f} ms = {r['bandwidth_gb_s']:,.1f} GB/s")
    if "share_of_peak" in r:
        share = r["share_of_peak"]
        bound = ("bound by memory" if share >= 0.5 else
                 "bound by fixed per-step costs, not by memory" if share < 0.2 else
                 "partly bound by memory")
        line += (f", {share:.1%} of the {r['gpu_model']}'s {r['peak_gb_s']:,.0f} GB/s "
                 f"(reading the weights takes at least {r['weights_floor_ms']:.3f} ms): "
                 f"{bound}")
    elif r.get("gpu"):
        line += f" (no datasheet peak known for {r['gpu']})"
    else:
        line += " (no GPU seen on this host: no share of a peak)"
    return line
