"""Write a verifier directory again in a shipped quantized format, and its dequantized twin.

``python -m pipeline.eagle3.hardware.quantize_checkpoint --verifier DIR --format fp8|int4 --out DIR
[--twin DIR] [--int4-targets experts|all]``

Tests and benchmarks cannot download DeepSeek-V3, Kimi-K2 or Kimi-K2.5, so this makes their
formats (:mod:`pipeline.eagle3.hardware.quant_formats`) from any small verifier (``eagle3.build_verifier``'s, random or
trained): the weights in the format with the ``quantization_config`` those models ship, the
tokenizer and generation config copied. ``--twin`` writes the same model in bf16 whose every
weight is the exact dequantization of what the quantized checkpoint stores, so that any
difference between the two at run time is the format's arithmetic, not its rounding of the
weights.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from pipeline.eagle3.hardware.quant_formats import (
    FP8_BLOCK,
    INT4_GROUP,
    fp8_config,
    int4_config,
    quant_format,
    quantize_state,
)
from pipeline.errors import ActionError

FORMATS = ("fp8", "int4")


def read_state(verifier: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    files = sorted(verifier.glob("*.safetensors"))
    if not files:
        raise ActionError("no *.safetensors weights to quantize", where=str(verifier))
    state: dict[str, Any] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def quantize_dir(verifier: Path, out: Path, fmt_name: str, twin: Path | None = None,
                 int4_targets: str = "experts", group: int = INT4_GROUP) -> dict[str, Any]:
    """Write ``out`` (and ``twin``); returns ``{"quantized": n, "tensors": n, "bytes": n}``."""
    import torch
    from safetensors.torch import save_file

    cfg_path = verifier / "config.json"
    if not cfg_path.is_file():
        raise ActionError("no config.json: not a Hugging Face model directory",
                          where=str(verifier))
    cfg = json.loads(cfg_path.read_text())
    if cfg.get("quantization_config"):
        raise ActionError("the verifier is already quantized", where=str(cfg_path))
    qc = fp8_config(FP8_BLOCK) if fmt_name == "fp8" else int4_config(group, int4_targets)
    fmt = quant_format({"quantization_config": qc})
    assert fmt is not None
    state = read_state(verifier)
    stored, dense = quantize_state(state, fmt, torch.bfloat16)
    n_quant = sum(1 for k in state if k.endswith(".weight") and fmt.quantizes(k))
    if n_quant == 0:
        raise ActionError(f"no weight of the verifier matches the {fmt.label} targets",
                          where=str(verifier))
    for target, tensors, quant in ((out, stored, qc), (twin, dense, None)):
        if target is None:
            continue
        target.mkdir(parents=True, exist_ok=True)
        for old in target.glob("*.safetensors*"):
            old.unlink()
        save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
        new_cfg = dict(cfg, torch_dtype="bfloat16", dtype="bfloat16")
        new_cfg.pop("quantization_config", None)
        if quant is not None:
            new_cfg["quantization_config"] = quant
        (target / "config.json").write_text(json.dumps(new_cfg, indent=2) + "\n")
        for f in verifier.iterdir():
            keep = f.name in ("tokenizer.json", "tokenizer_config.json",
                              "special_tokens_map.json", "generation_config.json")
            if f.is_file() and (keep or not f.name.endswith((".safetensors", ".json"))):
                shutil.copy2(f, target / f.name)
    size = (out / "model.safetensors").stat().st_size
    return {"quantized": n_quant, "tensors": len(stored), "bytes": size, "format": fmt.label}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.eagle3.hardware.quantize_checkpoint",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--verifier", type=Path, required=True, help="Hugging Face dir to quantize")
    p.add_argument("--format", choices=FORMATS, required=True,
                   help="fp8: block-scaled as DeepSeek-V3/Kimi-K2; int4: compressed-tensors "
                        "pack-quantized as Kimi-K2.5")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--twin", type=Path, default=None,
                   help="also write the dequantized bf16 twin here")
    p.add_argument("--int4-targets", choices=("experts", "all"), default="experts",
                   help="int4: the routed experts only (Kimi-K2.5) or every projection")
    p.add_argument("--group-size", type=int, default=INT4_GROUP)
    args = p.parse_args(argv)
    try:
        info = quantize_dir(args.verifier, args.out, args.format, args.twin,
                            args.int4_targets, args.group_size)
    except ActionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"[quantize] {args.out}: {info['format']}, {info['quantized']} weights quantized, "
          f"{info['bytes'] / 1e6:.2f} MB" + (f"; bf16 twin in {args.twin}" if args.twin else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
