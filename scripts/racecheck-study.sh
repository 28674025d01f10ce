#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle (scripts/gpu-bundle.sh puts it, with the reproducer
# source and um's streams.ptx, in racecheck/): which programs make compute-sanitizer racecheck
# end with "Internal Sanitizer Error: Detected a failure to track a kernel launch"
# (docs/reliability.md).
#
#   bash racecheck/study.sh [OUT_DIR]        # default OUT_DIR: ./racecheck-out
#
# STUDY_PARTS="threads async" (the default: both) picks the sections: `threads` is the study
# of threads below (steps 2 and 3); `async` is the pattern of examples/async_requests.rs, which
# hung once under racecheck (300 s, no summary) and once reported the same internal error
# (2x H200, 2026-11-23): 8 host threads, a non-blocking stream created per round, 2 kernels per
# round, waits by cuStreamSynchronize and by stream callback, each repeated; then
# async_requests itself, repeated, with every thread's stack taken by stall-stacks.sh if it is
# still running after STUDY_STACKS_S (default 60) seconds; then both three at once on the GPU.
#
# 1. Builds bench/racecheck_repro.cu with nvcc (driver API + runtime API, no um).
# 2. Runs it under racecheck for 1, 2, 4, 8 and 16 host threads, on created streams and on the
#    per-thread default stream (driver API, um's PTX JIT-loaded as um does), then the runtime
#    API and the other memory kinds.
# 3. Runs um's per_thread_streams example and gpu_stress test under racecheck with fewer
#    host threads (UM_THREADS, UM_STRESS_THREADS) and iterations.
#
# Every run has its own time limit (`timeout`); the whole study stops starting runs after
# BUDGET_S seconds (default 270), so it ends within 5 minutes. Each run's verdict is one line
# of OUT_DIR/summary.txt (also printed): clean, INTERNAL-ERROR, HAZARDS, TIMEOUT (the limit
# hit: a hang or a crawl), FAILED (the program's own failure) or SKIPPED (budget spent). The
# full logs of every run are in OUT_DIR/logs/.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bundle=$(dirname "$here")
out=${1:-$PWD/racecheck-out}
mkdir -p "$out/logs"
summary="$out/summary.txt"
: >"$summary"
budget=${BUDGET_S:-270}
start=$(date +%s)
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)

say() { echo "$*" | tee -a "$summary"; }

say "racecheck study, $(date -u +%FT%TZ)"
command -v nvidia-smi >/dev/null &&
  say "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
say "compute-sanitizer: $("$cs" --version 2>/dev/null | grep -i version | head -n 1)"

repro="$out/racecheck_repro"
if ! "$nvcc" -O2 -std=c++17 -arch=compute_75 -o "$repro" "$here/racecheck_repro.cu" -lcuda \
  >"$out/logs/build.log" 2>&1; then
  say "build of racecheck_repro FAILED (logs/build.log)"
  cat "$out/logs/build.log"
  exit 1
fi
ptx="$here/streams.ptx"
if [ ! -f "$ptx" ]; then
  # The bundle copies um's own PTX; without it, build the same kernel file the same way.
  ptx="$out/streams.ptx"
  "$nvcc" --ptx -arch=compute_75 -I "$here" -o "$ptx" "$here/streams.cu" >>"$out/logs/build.log" 2>&1 ||
    { say "PTX build FAILED"; exit 1; }
fi

# verdict_of LOG RC LIMIT: one run's verdict from its log and exit status.
verdict_of() {
  local log=$1 rc=$2 limit=$3 last
  last=$(grep -v '^=========' "$log" | grep -v '^\s*$' | tail -n 1 | cut -c1-70)
  if grep -q "Internal Sanitizer Error" "$log"; then
    echo "INTERNAL-ERROR ($(grep -m1 -o 'Internal Sanitizer Error:.*' "$log" | cut -c1-80))"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "TIMEOUT (limit ${limit}s)"
  elif [ "$rc" = 99 ] || { grep -q "RACECHECK SUMMARY" "$log" && ! grep -q "RACECHECK SUMMARY: 0 hazards" "$log"; }; then
    echo "HAZARDS ($(grep -m1 -o 'RACECHECK SUMMARY.*' "$log"), rc=$rc)"
  elif grep -q "RACECHECK SUMMARY: 0 hazards" "$log"; then
    if [ "$rc" = 0 ]; then
      echo "clean"
    else
      # Examples check timing shapes that an instrumented run may not meet: the tool's verdict
      # is what counts here, the program's own is reported.
      echo "clean (racecheck); the program itself exited $rc: $last"
    fi
  else
    echo "FAILED (no racecheck summary, rc=$rc: $last)"
  fi
}

n=0
# run LABEL LIMIT_S ENV... -- PROGRAM ARGS...
# With STACKS_TO=FILE, every thread's stack of a run still going after STUDY_STACKS_S (default
# 60) seconds goes to FILE first (stall-stacks.sh, cuda-gdb). With SIDE_BY_SIDE=K, K copies run
# at once on the same GPU (as run.sh's sanitizer parts run programs beside each other), each
# with its own log, stacks file (FILE.1 .. FILE.K) and verdict line.
run() {
  local label=$1 limit=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  n=$((n + 1))
  local elapsed=$(($(date +%s) - start))
  local left=$((budget - elapsed))
  if [ "$left" -lt 5 ]; then
    say "$(printf '%-72s SKIPPED (budget of %ss spent)' "$label" "$budget")"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local copies=${SIDE_BY_SIDE:-1}
  local base
  base="$out/logs/$(printf '%02d' "$n")-$(printf '%s' "$label" | tr -c 'A-Za-z0-9=_.-' '_')"
  local t0
  t0=$(date +%s)
  # Each copy's log (and its stacks file): one copy keeps the plain names.
  local logs=("$base.log") c
  [ "$copies" -gt 1 ] && logs=() && for c in $(seq "$copies"); do logs+=("$base.$c.log"); done
  for c in $(seq "$copies"); do
    (
      local log=${logs[c - 1]} stacks=${STACKS_TO:-}
      [ "$copies" -gt 1 ] && stacks=${stacks:+$stacks.$c}
      local wrap=()
      [ -n "$stacks" ] && wrap=(bash "$bundle/stall-stacks.sh" "${STUDY_STACKS_S:-60}" "$stacks")
      "${wrap[@]}" env "${envs[@]}" timeout -k 5 "$limit" "$cs" --tool racecheck --report-api-errors no \
        --error-exitcode 99 "$@" >"$log" 2>&1
      echo $? >"$log.rc"
    ) &
  done
  wait
  local secs=$(($(date +%s) - t0))
  for c in $(seq "$copies"); do
    local log=${logs[c - 1]} tag=""
    [ "$copies" -gt 1 ] && tag=" [$c of $copies at once]"
    say "$(printf '%-72s %-8s %s' "$label$tag" "${secs}s" "$(verdict_of "$log" "$(cat "$log.rc")" "$limit")")"
    rm -f "$log.rc"
  done
}

# The reproducer without a sanitizer first: it must be right on its own.
if "$repro" --threads 16 --ptx "$ptx" >"$out/logs/00-plain.log" 2>&1 &&
  "$repro" --threads 16 --stream per-thread --ptx "$ptx" >>"$out/logs/00-plain.log" 2>&1; then
  say "repro without sanitizer: $(tail -n 1 "$out/logs/00-plain.log")"
else
  say "repro without sanitizer FAILED: $(tail -n 2 "$out/logs/00-plain.log" | tr '\n' ' ')"
fi

parts=" ${STUDY_PARTS:-threads async} "
if [[ "$parts" == *" threads "* ]]; then
say ""
say "== reproducer (no um): driver API, um's PTX JIT-loaded, managed memory attached to the stream"
for stream in per-thread owned; do
  for threads in 1 2 4 8 16; do
    run "repro driver stream=$stream threads=$threads" 20 -- \
      "$repro" --api driver --stream "$stream" --threads "$threads" --ptx "$ptx"
  done
done

say ""
say "== um's programs, fewer host threads and iterations (UM_SANITIZE=1: small workloads)"
for threads in 2 8; do
  run "um example per_thread_streams UM_THREADS=$threads" 40 UM_SANITIZE=1 UM_THREADS=$threads -- \
    "$bundle/examples/per_thread_streams"
done
for threads in 2 16; do
  run "um test gpu_stress UM_STRESS_THREADS=$threads UM_STRESS_ITERS=2" 40 \
    UM_SANITIZE=1 UM_STRESS_THREADS=$threads UM_STRESS_ITERS=2 -- \
    "$bundle/tests/gpu" --include-ignored --test-threads=1 gpu_stress::

done

say ""
say "== reproducer variants: which ingredient matters (16 threads, then 8)"
for threads in 16 8; do
  run "repro runtime stream=per-thread threads=$threads (kernel compiled in)" 20 -- \
    "$repro" --api runtime --stream per-thread --threads "$threads"
  run "repro runtime stream=owned threads=$threads" 20 -- \
    "$repro" --api runtime --stream owned --threads "$threads"
  run "repro driver stream=owned memory=device threads=$threads (no managed memory)" 20 -- \
    "$repro" --api driver --stream owned --memory device --threads "$threads" --ptx "$ptx"
  run "repro driver stream=legacy threads=$threads" 20 -- \
    "$repro" --api driver --stream legacy --threads "$threads" --ptx "$ptx"
done
fi

if [[ "$parts" == *" async "* ]]; then
say ""
say "== async_requests' pattern without um: 8 threads, a stream per round, 2 kernels a round"
for round in 1 2 3; do
  for wait in sync callback; do
    run "repro driver stream=per-iter wait=$wait launches=2 iters=8 threads=8 (#$round)" 30 -- \
      "$repro" --api driver --stream per-iter --wait "$wait" --launches 2 --iters 8 --threads 8 --ptx "$ptx"
  done
  run "repro driver stream=owned wait=callback launches=2 iters=8 threads=8 (#$round)" 30 -- \
    "$repro" --api driver --stream owned --wait callback --launches 2 --iters 8 --threads 8 --ptx "$ptx"
done
say ""
say "== um's async_requests under racecheck (UM_SANITIZE=1: 64 requests), repeated"
for round in 1 2 3 4 5 6; do
  STACKS_TO="$out/logs/async_requests-$round.stacks" run "um example async_requests (#$round)" 90 \
    UM_SANITIZE=1 -- "$bundle/examples/async_requests"
  [ -s "$out/logs/async_requests-$round.stacks" ] &&
    say "    stacks of the run still going after ${STUDY_STACKS_S:-60} s: logs/async_requests-$round.stacks"
done
say ""
say "== the same, three at once on the GPU (the internal error came so, 2x H200, 2026-11-23)"
for round in 1 2; do
  SIDE_BY_SIDE=3 run "repro driver stream=per-iter wait=callback launches=2 iters=8 threads=8 (#$round)" 30 -- \
    "$repro" --api driver --stream per-iter --wait callback --launches 2 --iters 8 --threads 8 --ptx "$ptx"
  SIDE_BY_SIDE=3 STACKS_TO="$out/logs/async_requests-3x-$round.stacks" run "um example async_requests (#$round)" 90 \
    UM_SANITIZE=1 -- "$bundle/examples/async_requests"
  for c in 1 2 3; do
    [ -s "$out/logs/async_requests-3x-$round.stacks.$c" ] &&
      say "    stacks of a run still going after ${STUDY_STACKS_S:-60} s: logs/async_requests-3x-$round.stacks.$c"
  done
done
fi

say ""
say "total $(($(date +%s) - start))s; logs in $out/logs"
