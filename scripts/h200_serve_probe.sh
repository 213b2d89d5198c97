#!/usr/bin/env bash
# Does `vllm serve` start on the lent H200, and what does it cost? A short probe, run once
# before the whole pipeline (docs/serving.md, "vLLM's OpenAI server on the H200").
#
# On the device, after the two unpack calls (../shared/tools/vllm-h200/README.md):
#   export PYTHONPATH=/tmp/vsite VLLM_USE_FLASHINFER_SAMPLER=0
#   cd .device/i22 && bash scripts/h200_serve_probe.sh       # logs and JSON under $OUT
#
# 1. imports vLLM's OpenAI api_server with a faulthandler stack dump every 30 s (what hangs);
# 2. builds a small verifier on the GPU (no download);
# 3. starts `vllm serve` on it through the serve action (the baseline: no speculation),
#    every Python process of the server dumping its stacks every 40 s into the server log;
# 4. runs the benchmark action against it at concurrency 1, 4, 16, 64;
# 5. stops the server and shows nvidia-smi's process list (it must be empty).
set -uo pipefail
OUT=${OUT:-/tmp/probe-out}
mkdir -p "$OUT"
WORK=${WORK:-/tmp/probe}
mkdir -p "$WORK"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONPATH="$PWD:${PYTHONPATH:-/tmp/vsite}"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/probe.log"; }

# faulthandler in every Python process the server starts: configuration, not a patch
mkdir -p "$WORK/dump"
cat > "$WORK/dump/sitecustomize.py" <<'PY'
import faulthandler, sys
faulthandler.dump_traceback_later(40, repeat=True, file=sys.stderr)
PY

log "import probe: vllm.entrypoints.openai.api_server"
( t0=$(date +%s)
  timeout -s KILL 100 python3 -X faulthandler -c "
import faulthandler, sys, time
faulthandler.dump_traceback_later(30, repeat=True, file=sys.stderr)
t = time.time()
import vllm.entrypoints.openai.api_server
print(f'import vllm.entrypoints.openai.api_server: {time.time() - t:.1f} s', flush=True)
import os; os._exit(0)
" >"$OUT/import.log" 2>&1
  echo "rc=$? wall=$(( $(date +%s) - t0 )) s" >>"$OUT/import.log" ) &
IMPORT=$!

log "verifier"
python3 -m pipeline.eagle3.build_verifier --out "$WORK/verifier" --prompts-out "$WORK/prompts.jsonl" \
  --prompts 64 --steps 200 --train-samples 4000 --hidden-size 384 --layers 18 --heads 6 \
  --kv-heads 2 --intermediate-size 1152 --vocab-size 2048 --batch-size 64 --check-prompts 0 \
  --device cuda --result "$WORK/verifier.json" 2>&1 | tail -n 3 | tee -a "$OUT/probe.log"
wait $IMPORT; cat "$OUT/import.log" | tail -n 40 | tee -a "$OUT/probe.log"

log "serve (baseline) with stack dumps"
ENV='{"HF_HUB_OFFLINE":"1","TRANSFORMERS_OFFLINE":"1","VLLM_NO_USAGE_STATS":"1","DO_NOT_TRACK":"1","VLLM_USE_FLASHINFER_SAMPLER":"0","PYTHONPATH":"'"$WORK/dump:$PYTHONPATH"'"}'
timeout -s INT 330 python3 -m pipeline.eagle3.serve --target "$WORK/verifier" --no-speculative \
  --port 8000 --command '["python3","-m","vllm.entrypoints.cli.main"]' \
  --gpu-memory-utilization 0.3 --max-model-len 512 --health-timeout 300 \
  --env "$ENV" --log "$OUT/server.log" --result "$OUT/serve.json" >"$OUT/serve.out" 2>&1
log "serve rc=$?"; tail -n 5 "$OUT/serve.out" | tee -a "$OUT/probe.log"

up() { python3 -c "import sys,urllib.request as u; sys.exit(0 if u.urlopen('http://127.0.0.1:8000/health', timeout=5).status == 200 else 1)" 2>/dev/null; }
if up; then
  log "benchmark"
  timeout 150 python3 -m pipeline.eagle3.benchmark --url http://127.0.0.1:8000 \
    --prompts "$WORK/prompts.jsonl" --concurrency '[1,4,16,64]' --max-tokens 128 \
    --warmup 2 --no-require-spec-metrics --out "$OUT/bench.json" --result "$OUT/benchmark.json" \
    2>&1 | tail -n 20 | tee -a "$OUT/probe.log"
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/metrics').read().decode())" | grep -E '^vllm:' | head -n 60 >"$OUT/metrics.txt"
fi
python3 - <<'PY' 2>&1 | tee -a "$OUT/probe.log"
import json, os
from pipeline.service import ServiceRecord, stop_group
path = os.path.join(os.environ["OUT"], "serve.json")
try:
    rec = ServiceRecord.from_json(json.load(open(path))["metrics"]["service"])
except Exception as exc:
    print("no service record:", exc)
else:
    print("stop:", stop_group(rec.pgid, 15, rec.start_time))
PY
sleep 2
log "nvidia-smi after stop"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1 | tee -a "$OUT/probe.log"
grep -E "Model loading took|torch.compile take|Compil|Graph capturing|init engine|Capturing CUDA|Starting vLLM API|startup complete|Dynamo|compile" "$OUT/server.log" | head -n 40 >"$OUT/startup.txt"
log "done"
