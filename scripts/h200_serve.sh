#!/usr/bin/env bash
# examples/eagle3-h200.yaml (or $SPEC) through the harness on a GPU host, served for real,
# and the sabotaged variant blocked by its served numbers. Logs and JSON go to $OUT as they come.
#
# On the device, after the two unpack calls (../shared/tools/vllm-h200/README.md), from a
# copy of the project. The device ends a command after ten minutes and kills what it leaves
# running, except a new process session; and it keeps a machine only 30 s after a call.
# So phase b starts `harness run` in a session of its own and follows its log for at most
# $BUDGET seconds (default 560); `b` again (within 30 s) follows the same run on, and once it
# has ended collects the results. Each line is one device call:
#
#   export PYTHONPATH=/tmp/vsite VLLM_USE_FLASHINFER_SAMPLER=0
#   bash scripts/h200_serve.sh a    # verifier .. verify                           ~540 s
#   bash scripts/h200_serve.sh b    # served, started detached, followed          <=560 s
#   bash scripts/h200_serve.sh b    # followed on (again while it says "still running")
#   bash scripts/h200_serve.sh s    # the sabotaged drafter, served                ~250 s
#
# Phase b without an earlier a runs the whole spec. Measured on an H100 (2026-12-07, the
# P-EAGLE stages left out): verifier .. export 258 s; three servers started during verify
# (161 s) and answered after 165 s; sweep 48; the schedule's server 68; benchmark 186 (2 s
# runs, 40 s a level: every level wide); reference 64: 790 s in all. On an H200 with
# every stage (2026-12-07): verifier .. export 273 s, train_peagle 55, verify 104 (five
# servers answered after 152-213 s), sweep 47, benchmark_peagle 70, serve_schedule 74. The
# benchmark takes up to 180 s a level, about 13 minutes; the reference in two rounds
# about 2. On an H100 again (2026-12-07, each server and the client on CPUs of their own,
# 120 s a level): verifier .. export 283 s, verify 148, sweep 47, serve_schedule 64,
# benchmark 418 (c=4, 16, 64 settled within +-5%), reference 106.
# SPEC=eagle3-3b runs examples/eagle3-3b.yaml the same way (its own run directory and
# session); RUN_ARGS adds options to the detached `harness run` (e.g. '--retry-blocked').
# To spend less, SET overrides keys of the copied spec before a fresh run, e.g.
#   SET='sweep.with.min_seconds=3 reference.run=' bash scripts/h200_serve.sh b
# (`stage.with.key=value` as YAML; an empty `reference.run=` drops that stage.)
#
# The run directory and the store live under $WORK (default /tmp/h200-serve), outside the
# copy, which the device replaces on every call; a warm machine keeps /tmp. A machine given
# back loses both: `a` then starts over.
set -uo pipefail
PHASE=${1:-all}
OUT=${OUT:-/tmp/h200-serve-out}
WORK=${WORK:-/tmp/h200-serve}
BUDGET=${BUDGET:-560}
SPEC=${SPEC:-eagle3-h200}   # examples/$SPEC.yaml; eagle3-3b is the 3.1B verifier's example
SESSION=$([ "$SPEC" = eagle3-h200 ] && echo h200 || echo "$SPEC")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$ROOT:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export HARNESS_DB="$WORK/state.db" HARNESS_REPO="$ROOT"
RUNS="$WORK/runs/$SPEC"
harness() { python3 -m harness "$@"; }
stamp() { echo "[$(date +%T)] $*"; }

copy_specs() {  # the examples' run directory is relative to the spec: keep them beside it
  cp "$ROOT/examples/$SPEC.yaml" "$ROOT"/examples/eagle3-h200-sabotaged.yaml "$WORK/"
  [ -n "${SET:-}" ] || return 0
  python3 - "$WORK/$SPEC.yaml" ${SET} <<'PY'
import sys, yaml
path, *sets = sys.argv[1:]
doc = yaml.safe_load(open(path))
stages = {s["name"]: s for s in doc["stages"]}
for item in sets:
    key, _, value = item.partition("=")
    name, *field = key.split(".")
    if field == ["run"] and value == "":
        doc["stages"] = [s for s in doc["stages"] if s["name"] != name]
        print(f"SET: stage {name} dropped")
        continue
    target = stages[name]
    for part in field[:-1]:
        target = target.setdefault(part, {})
    target[field[-1]] = yaml.safe_load(value)
    print(f"SET: {key} = {target[field[-1]]!r}")
yaml.safe_dump(doc, open(path, "w"), sort_keys=False)
PY
}

gpu_procs() {
  stamp "GPU processes (nvidia-smi --query-compute-apps):"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
  stamp "server processes left: $(pgrep -fc 'vllm.entrypoints' || true)"
}

collect() {  # $1: a name; the stage results, server logs, bench.json, the schedule and the
  # reference comparison, in one archive
  ( cd "$WORK" && { find runs -path '*/.harness/*' \( -name '*.json' -o -name '*.log' \) \
      -size -8M -print0; find runs -maxdepth 3 \( -name schedule.json -o -path \
      '*/reference/*' \) -size -8M -print0; } | tar -czf "$OUT/$1-runs.tar.gz" --null -T - \
  ) 2>/dev/null
  for f in "$RUNS/schedule.json" "$RUNS/reference/reference.json"; do
    [ -f "$f" ] && cp "$f" "$OUT/$1-$(basename "$f")"
  done
}

phase_a() {
  copy_specs
  stamp "phase a: harness run --until verify"
  harness -s "$SESSION" run --until verify "$WORK/$SPEC.yaml" 2>&1 | tee "$OUT/a.log"
  stamp "rc=${PIPESTATUS[0]}"
}

phase_b() {  # start the served run detached (or find it running), follow it up to $BUDGET s
  local pid=""
  [ -f "$WORK/b.pid" ] && pid=$(cat "$WORK/b.pid")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    stamp "phase b: following the served run already going (pid $pid)"
  else
    copy_specs
    stamp "phase b: harness run, detached (resume: finished stages are skipped)"
    : >"$WORK/b.log"
    setsid nohup bash -c 'python3 -m harness -s "$3" run "$1" ${RUN_ARGS:-}; echo "rc=$?" >"$2"' _ \
      "$WORK/$SPEC.yaml" "$WORK/b.rc" "$SESSION" >>"$WORK/b.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$WORK/b.pid"
    rm -f "$WORK/b.rc"
  fi
  # the whole log so far, then what it adds, until the run ends or the budget is spent
  timeout "$BUDGET" tail -n +1 -f --pid="$pid" "$WORK/b.log" | tee "$OUT/b.log"
  if kill -0 "$pid" 2>/dev/null; then
    stamp "still running (harness run pid $pid): call 'bash scripts/h200_serve.sh b' again" \
      "within 30 s" | tee -a "$OUT/b.log"
    # what has finished so far comes back too, in case no later call gets to collect
    { harness -s "$SESSION" status; harness -s "$SESSION" verifications --json; } >"$OUT/b-status.txt" 2>&1
    collect b
    return 0
  fi
  stamp "$(cat "$WORK/b.rc" 2>/dev/null || echo 'rc unknown')" | tee -a "$OUT/b.log"
  sleep 3; gpu_procs 2>&1 | tee -a "$OUT/b.log"
  { harness -s "$SESSION" status; harness -s "$SESSION" verifications --json; } >"$OUT/b-status.txt" 2>&1
  collect b
}

phase_s() {
  copy_specs
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
  all) phase_a; BUDGET=100000 phase_b; phase_s ;;
  *) echo "usage: $0 a|b|s|all" >&2; exit 2 ;;
esac
