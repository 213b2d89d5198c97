#!/usr/bin/env bash
# bench/eagle3/hidden_states_backends.py on the GPU host, with the vLLM that
# ../shared/tools/vllm-h200/ carries (unpacked by .device/unpack.sh into /tmp/vsite):
#
#   bash .device/unpack.sh && bash bench/eagle3/hidden_states_backends.sh [--budget-s N] [--only h200,deepseek,quantized,deepseek_fp8]
#
# Log and JSON go to $OUT (default runs/hidden_states_backends); stdout ends with the table.
#
# vLLM imports compressed-tensors for any quantized checkpoint (deepseek_fp8) and the carry
# lacks it; put it in the third piece before the device calls:
#   pip download --no-deps -d .device/vllm-c compressed-tensors==0.17.0 loguru
set -o pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:/tmp/vsite" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
OUT="${OUT:-$PWD/runs/hidden_states_backends}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
df -h /dev/shm /tmp >> "$OUT/gpu.txt" 2>&1
if [[ "$*" == *deepseek_fp8* ]] && ! python3 -c "import compressed_tensors" 2>/dev/null; then
  echo "bench/eagle3/hidden_states_backends.sh: deepseek_fp8 needs compressed-tensors (see this script's header)" >&2
  exit 2
fi
python3 -m bench.eagle3.hidden_states_backends --out "$OUT" "$@" 2>&1 | tee "$OUT/log" \
  | grep -E "^\[bench|^verifier |^h200 |^deepseek|Traceback|Error|error:" | tail -n 80
