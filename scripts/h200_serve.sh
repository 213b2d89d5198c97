#!/usr/bin/env bash
# examples/eagle3-h200.yaml through the harness on the lent H200, served for real, and the
# sabotaged variant blocked by its served numbers. Logs and JSON go to $OUT as they come.
#
# On the device, after the two unpack calls (../shared/tools/vllm-h200/README.md), from a
# copy of the project (the device's ten-minute limit per command splits the run in two;
# the second call is a resume that skips every finished stage):
#
#   export PYTHONPATH=/tmp/vsite VLLM_USE_FLASHINFER_SAMPLER=0
#   bash scripts/h200_serve.sh a     # verifier .. verify                 (~6 min)
#   bash scripts/h200_serve.sh b     # resume: serve x2, benchmark         (~5 min)
#   bash scripts/h200_serve.sh s     # the sabotaged drafter, served       (~4 min)
#   bash scripts/h200_serve.sh all   # a, b and s in one go (no time limit)
#
# The run directory and the store live under $WORK (default /tmp/h200-serve), outside the
# copy, which the device replaces on every call; a warm machine keeps /tmp.
set -uo pipefail
PHASE=${1:-all}
OUT=${OUT:-/tmp/h200-serve-out}
WORK=${WORK:-/tmp/h200-serve}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$ROOT:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export HARNESS_DB="$WORK/state.db"
# the examples' run directory is relative to the spec: keep the specs beside the runs
cp "$ROOT"/examples/eagle3-h200.yaml "$ROOT"/examples/eagle3-h200-sabotaged.yaml "$WORK/"
harness() { python3 -m harness "$@"; }
stamp() { echo "[$(date +%T)] $*"; }

gpu_procs() {
  stamp "GPU processes (nvidia-smi --query-compute-apps):"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
  stamp "server processes left: $(pgrep -fc 'vllm.entrypoints' || true)"
}

collect() {  # $1: a name; the stage results, server logs and bench.json, in one archive
  ( cd "$WORK" && find runs -path '*/.harness/*' \( -name '*.json' -o -name '*.log' \) \
      -size -8M -print0 | tar -czf "$OUT/$1-runs.tar.gz" --null -T - ) 2>/dev/null
}

phase_a() {
  stamp "phase a: harness run --until verify"
  harness -s h200 run --until verify "$WORK/eagle3-h200.yaml" 2>&1 | tee "$OUT/a.log"
  stamp "rc=${PIPESTATUS[0]}"
}

phase_b() {
  stamp "phase b: harness run (resume: finished stages are skipped)"
  harness -s h200 run "$WORK/eagle3-h200.yaml" 2>&1 | tee "$OUT/b.log"
  stamp "rc=${PIPESTATUS[0]}"
  sleep 3; gpu_procs 2>&1 | tee -a "$OUT/b.log"
  { harness -s h200 status; harness -s h200 verifications --json; } >"$OUT/b-status.txt" 2>&1
  collect b
}

phase_s() {
  stamp "phase s: the sabotaged drafter, in the same run directory"
  harness -s h200-sabotaged run "$WORK/eagle3-h200-sabotaged.yaml" 2>&1 | tee "$OUT/s.log"
  stamp "rc=${PIPESTATUS[0]}"
  sleep 3; gpu_procs 2>&1 | tee -a "$OUT/s.log"
  { harness -s h200-sabotaged status; harness -s h200-sabotaged verifications --json; } \
    >"$OUT/s-status.txt" 2>&1
  collect s
}

case "$PHASE" in
  a) phase_a ;;
  b) phase_b ;;
  s) phase_s ;;
  all) phase_a; phase_b; phase_s ;;
  *) echo "usage: $0 a|b|s|all" >&2; exit 2 ;;
esac
