#!/usr/bin/env python3
"""``pipeline.eagle3.hidden_states`` (the ``hf`` backend) with every linear's input rounded to
e4m3 per token and 128 channels: what FP8 implies for a verifier, measured on its bf16 twin.

FP8 block-scaled kernels (vLLM's, transformers') quantize each linear's input that way
before the FP8 matmul; the twin's weights are already the exact dequantization of the FP8
ones, so this run differs from an FP8 engine only in where the products are summed. Its
error against an fp32 reference is the yardstick for "the FP8 checkpoint's states are within
what FP8 implies". Same arguments as the stage:

    python -m bench.eagle3.e4m3_inputs --verifier TWIN --tokens DIR --out DIR ... --result R.json
"""

from __future__ import annotations

import sys

from bench.eagle3.quantized_verifier import fake_quant_inputs
from pipeline.eagle3 import hidden_states

_load_placed = hidden_states.load_placed


def _load_rounded(*args, **kwargs):
    placed = _load_placed(*args, **kwargs)
    hooks = fake_quant_inputs(placed.model, experts=True)
    print(f"[e4m3_inputs] {len(hooks)} linears and expert blocks take e4m3-rounded inputs",
          flush=True)
    return placed


if __name__ == "__main__":
    hidden_states.load_placed = _load_rounded
    raise SystemExit(hidden_states.main(sys.argv[1:]))
