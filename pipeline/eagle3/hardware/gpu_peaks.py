"""A GPU's peak dense bf16 rate and memory bandwidth, from its model name.

The vendor's datasheet figures, without sparsity: what MFU (model FLOPs over time over the
peak) and a roofline (weight bytes over time over the bandwidth) are quoted against.
``torch.cuda.get_device_name`` names the model (``NVIDIA H100 80GB HBM3``); a spec's
``plan: {gpu: H100}`` names it for ``harness check``. An unknown model has no peak: MFU is
then left out rather than guessed. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPeak:
    model: str            # the name this table gives it
    bf16_tflops: float    # dense bf16 tensor-core rate, TFLOP/s
    hbm_tb_s: float       # memory bandwidth, TB/s (10^12 bytes a second)
    memory_gb: float      # memory, GB (10^9 bytes)


# NVIDIA's datasheets (dense, no 2:4 sparsity). Matched in this order: the first entry
# whose every key is in the lower-cased name, so the variants come before the plain name.
PEAKS: tuple[tuple[tuple[str, ...], GpuPeak], ...] = (
    (("h100", "nvl"), GpuPeak("H100 NVL", 835.0, 3.9, 94)),
    (("h100", "pcie"), GpuPeak("H100 PCIe", 756.0, 2.0, 80)),
    (("h100",), GpuPeak("H100 SXM", 989.4, 3.35, 80)),
    (("h200", "nvl"), GpuPeak("H200 NVL", 835.0, 4.8, 141)),
    (("h200",), GpuPeak("H200 SXM", 989.4, 4.8, 141)),
    (("gh200",), GpuPeak("GH200", 989.4, 4.0, 96)),
    (("a100", "40gb"), GpuPeak("A100 40GB", 312.0, 1.555, 40)),
    (("a100", "pcie"), GpuPeak("A100 80GB PCIe", 312.0, 1.935, 80)),
    (("a100",), GpuPeak("A100 80GB SXM", 312.0, 2.039, 80)),
    (("b200",), GpuPeak("B200", 2250.0, 8.0, 180)),
    (("l40s",), GpuPeak("L40S", 362.0, 0.864, 48)),
)


def gpu_peak(name: str | None) -> GpuPeak | None:
    """The peak of the GPU model ``name`` names (a device name or a short one: ``H100``,
    ``NVIDIA H200``), or None when this table does not know it."""
    if not name:
        return None
    low = name.lower()
    # "GH200" contains "h200": the Grace Hopper part is matched before the H200 rows
    if "gh200" in low:
        return next(p for keys, p in PEAKS if keys == ("gh200",))
    for keys, peak in PEAKS:
        if all(k in low for k in keys):
            return peak
    return None


def mfu(flops: float, seconds: float, peak: GpuPeak | None) -> float | None:
    """Model FLOPs utilisation: ``flops`` done in ``seconds`` over the GPU's bf16 peak
    (None without a known peak or time)."""
    if peak is None or seconds <= 0:
        return None
    return flops / seconds / (peak.bf16_tflops * 1e12)
