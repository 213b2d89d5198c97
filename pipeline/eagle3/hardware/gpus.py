"""What a GPU model can do at most: its memory bandwidth and its dense bf16 FLOP rate.

A measured figure means little without the ceiling it is held against: decoding at small
batch reads every weight once per step, so weight bytes / TPOT over the memory bandwidth
says whether a run is bound by memory or by fixed costs; training FLOP/s over the bf16 peak
is its MFU. The figures are the vendors' datasheet numbers (dense, no sparsity) for the
name ``nvidia-smi`` prints. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Peak", "peak_of"]

TB = 1e12


@dataclass(frozen=True)
class Peak:
    model: str            # the datasheet's name
    bandwidth: float      # bytes/s of HBM/GDDR
    bf16_flops: float     # dense bf16 tensor-core FLOP/s


# Most words first: "H100 NVL" before "H100"; each key must be a whole word of the name.
_PEAKS: tuple[tuple[tuple[str, ...], Peak], ...] = (
    (("GH200",), Peak("GH200 (H100 96GB HBM3)", 4.0 * TB, 989e12)),
    (("H200",), Peak("H200 (141GB HBM3e)", 4.8 * TB, 989e12)),
    (("H100", "NVL"), Peak("H100 NVL (94GB HBM3)", 3.9 * TB, 835e12)),
    (("H100", "PCIE"), Peak("H100 PCIe (80GB HBM2e)", 2.0 * TB, 756e12)),
    (("H100",), Peak("H100 SXM (80GB HBM3)", 3.35 * TB, 989e12)),
    (("B200",), Peak("B200 (180GB HBM3e)", 8.0 * TB, 2250e12)),
    (("A100", "80GB", "PCIE"), Peak("A100 PCIe 80GB (HBM2e)", 1.935 * TB, 312e12)),
    (("A100", "80GB"), Peak("A100 SXM 80GB (HBM2e)", 2.039 * TB, 312e12)),
    (("A100",), Peak("A100 40GB (HBM2)", 1.555 * TB, 312e12)),
    (("L40S",), Peak("L40S (48GB GDDR6)", 0.864 * TB, 362e12)),
    (("L4",), Peak("L4 (24GB GDDR6)", 0.3 * TB, 121e12)),
)


def peak_of(name: str) -> Peak | None:
    """The datasheet peaks of the GPU ``nvidia-smi`` names ``name``, or None for a model
    this table does not know (then no share of a peak is claimed)."""
    words = name.upper().replace("-", " ").split()
    for keys, peak in _PEAKS:
        if all(k in words for k in keys):
            return peak
    return None
