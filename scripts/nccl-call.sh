#!/usr/bin/env bash
# The NCCL GPU runs, in one or two calls of the device tool (every step takes about 560 s on
# 2x H200: run "tests examples memcheck", then "bench"): on a machine with two or more GPUs
# (the 2x and 4x H200 kinds), from the repository root, with target/gpu-bundle carried:
#
#   bash scripts/nccl-call.sh OUT [BUDGET_S]
#
# Runs these steps in order, each under `timeout`, and starts none after BUDGET_S seconds
# (default 540, to end within one call of 600 s); NCCL_CALL_STEPS="tests examples ..." picks
# some (the default is every one):
#   tests      tests/gpu_devices gpu_nccl:: (collectives, refusals, processes, a killed rank)
#   examples   data_parallel on every GPU: one process (a Group per step), one process per GPU,
#              both over sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), unified memory with
#              blocking communicators, coherent memory
#   memcheck   run.sh --sanitize memcheck of gpu_nccl and data_parallel (single process; the
#              ranks gpu_nccl starts run under the tool too)
#   host       um_bench --only nccl --quick: the host time per collective (the full 16,000
#              rounds) and one round of bus bandwidth, about 125 s on 2x H200
#   bench      bench.sh OUT/bench --only nccl --base bench/performance.md: section 10 of
#              docs/performance.md on this machine's GPUs (copy OUT/bench/docs over docs/)
# Every step's output goes to OUT/STEP.log; OUT/summary.txt has one line per step (ok, FAILED
# with its exit status, TIMEOUT, or SKIPPED) with its seconds, and is printed at the end. The
# exit status is 0 only when every step chosen ran and passed. tests/nccl_call_sh.rs runs it
# with stand-ins.
set -u
out=${1:?usage: nccl-call.sh OUT [BUDGET_S]}
budget=${2:-540}
mkdir -p "$out"
out=$(cd "$out" && pwd)
b=$(pwd)/target/gpu-bundle
[ -d "$b" ] || { echo "nccl-call: no $b (build it with scripts/gpu-bundle.sh and carry it)"; exit 2; }
export NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
steps=" ${NCCL_CALL_STEPS:-tests examples memcheck host bench} "
t0=$(date +%s)
summary="$out/summary.txt"
{
  echo "nccl-call, $(date -u +%FT%TZ), commit $(cat "$b/COMMIT" 2>/dev/null || echo unknown)"
  echo "gpus: ${gpus:-0} ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1))"
} >"$summary"
if [ "${gpus:-0}" -lt 2 ]; then
  echo "nccl-call: needs two or more GPUs; this machine has ${gpus:-0}" | tee -a "$summary"
  exit 2
fi

# step NAME LIMIT_S COMMAND...: runs COMMAND from the bundle under `timeout`, unless the budget
# is spent; one summary line.
failed=0
skipped=0
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - ($(date +%s) - t0)))
  if [ "$left" -lt 10 ]; then
    printf '%-56s SKIPPED (budget of %ss spent)\n' "$name" "$budget" >>"$summary"
    skipped=$((skipped + 1))
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local s0 rc
  s0=$(date +%s)
  echo "== $name: $*" >>"$out/$(echo "$name" | cut -d' ' -f1).log"
  (cd "$b" && timeout -k 10 "$limit" "$@") >>"$out/$(echo "$name" | cut -d' ' -f1).log" 2>&1
  rc=$?
  local verdict=ok
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    verdict="TIMEOUT (limit ${limit}s)"
    failed=$((failed + 1))
  elif [ "$rc" != 0 ]; then
    verdict="FAILED (exit $rc)"
    failed=$((failed + 1))
  fi
  printf '%-56s %-6s %s\n' "$name" "$(($(date +%s) - s0))s" "$verdict" >>"$summary"
}

if [[ "$steps" == *" tests "* ]]; then
  step "tests gpu_nccl" 300 ./tests/gpu_devices --include-ignored --test-threads=1 gpu_nccl::
fi
if [[ "$steps" == *" examples "* ]]; then
  step "examples data_parallel --single-process" 120 ./examples/data_parallel --single-process
  step "examples data_parallel --launch" 120 ./examples/data_parallel --launch
  step "examples data_parallel --launch --socket" 120 ./examples/data_parallel --launch --socket
  step "examples data_parallel --single-process --socket" 120 ./examples/data_parallel --single-process --socket
  step "examples data_parallel --storage unified --blocking" 120 ./examples/data_parallel --storage unified --blocking
  step "examples data_parallel --storage coherent" 120 ./examples/data_parallel --storage coherent
fi
if [[ "$steps" == *" memcheck "* ]]; then
  step "memcheck gpu_nccl data_parallel" 400 env UM_SANITIZE_ONLY="tests/gpu_nccl examples/data_parallel" \
    bash ./run.sh --sanitize memcheck
fi
if [[ "$steps" == *" host "* ]]; then
  step "host um_bench --only nccl --quick" 240 ./bench/um_bench --out "$out/host" --only nccl --quick
fi
if [[ "$steps" == *" bench "* ]]; then
  step "bench bench.sh --only nccl" 540 bash ./bench.sh "$out/bench" --only nccl --base bench/performance.md
fi
echo "total $(($(date +%s) - t0))s; $failed step(s) failed, $skipped skipped" >>"$summary"
cat "$summary"
# The host-time table, where that step ran.
[ -f "$out/host/docs/performance.md" ] && grep -A8 "^### Host time per step" "$out/host/docs/performance.md"
[ "$failed" = 0 ] && [ "$skipped" = 0 ]
