#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle folder that scripts/gpu-bundle.sh made.
#
#   run.sh              every test binary with --include-ignored (GPU tests included), then
#                       every example. Each test counts as one pass or failure, each example
#                       as one; the last line is "N passed, N failed".
#   run.sh --sanitize [TOOL ...]
#                       every test binary and example under compute-sanitizer, once per tool
#                       (default: memcheck racecheck synccheck initcheck). A program passes when
#                       the tool reports 0 errors. Only programs that use the GPU run; the fault
#                       tests (which fault on purpose) are skipped; UM_SANITIZE=1 shrinks the
#                       heaviest workloads and the stress test runs 20 iterations. Last line as
#                       above.
#
#   run.sh --emulate-no-concurrent-access [--sanitize [TOOL ...]]
#                       either of the above with UM_EMULATE_NO_CONCURRENT_ACCESS=1 exported:
#                       every context that Context::new opens behaves as if the device lacked
#                       concurrent managed access (docs/design.md), so every test and example
#                       takes that path.
#
# tests/gpu_two_devices runs only where nvidia-smi lists two or more GPUs ("skipped" elsewhere).
# Examples that draw timelines write them to $UM_SVG_DIR when it is set.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")"
if [ "${1:-}" = "--emulate-no-concurrent-access" ]; then
  shift
  export UM_EMULATE_NO_CONCURRENT_ACCESS=1
  echo "mode: UM_EMULATE_NO_CONCURRENT_ACCESS=1 (every context behaves as if the device lacked concurrent managed access)"
fi
passed=0
failed=0
command -v nvidia-smi >/dev/null &&
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.free --format=csv,noheader

if [ "${1:-}" = "--sanitize" ]; then
  shift
  tools=("$@")
  [ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck synccheck initcheck)
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  export UM_STRESS_ITERS=20 UM_SANITIZE=1
  # Timelines of runs under a sanitizer (small workloads, instrumented kernels) are not the
  # examples' timelines: never write them.
  unset UM_SVG_DIR
  # The programs that use the GPU, less the fault tests (they fault on purpose).
  programs=()
  for p in tests/gpu_* examples/*; do
    case "$p" in tests/gpu_faults | tests/gpu_two_devices) ;; *) programs+=("$p") ;; esac
  done
  for tool in "${tools[@]}"; do
    tool_ok=0
    tool_bad=0
    for prog in "${programs[@]}"; do
      args=()
      case "$prog" in tests/*) args=(--include-ignored --skip fault_ --test-threads=1) ;; esac
      extra=()
      [ "$tool" = memcheck ] && extra=(--leak-check full)
      log=$(mktemp)
      # CUDA API errors are not reported: every one already surfaces as an Err that fails its
      # test, and the bad-input tests make some on purpose.
      "$cs" --tool "$tool" "${extra[@]}" --report-api-errors no --error-exitcode 99 \
        "./$prog" "${args[@]}" >"$log" 2>&1
      rc=$?
      summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
      if [ "$rc" = 99 ] || ! grep -qE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" "$log"; then
        echo "!!! $tool $(basename "$prog"): rc=$rc ${summary:-no summary}"
        grep -E "^========= (Invalid|Uninitialized|Race|Barrier|Error|Program hit)" "$log" | sort | uniq -c | head -n 5
        tool_bad=$((tool_bad + 1))
      else
        # The program's own result under the tool (examples' timing checks may not hold while
        # the tool slows every kernel): reported, not counted.
        echo "ok  $tool $(basename "$prog"): ${summary} (program exit $rc)"
        tool_ok=$((tool_ok + 1))
      fi
      rm -f "$log"
    done
    echo "$tool: $tool_ok programs clean, $tool_bad with errors"
    passed=$((passed + tool_ok))
    failed=$((failed + tool_bad))
  done
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
  exit
fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
for t in tests/*; do
  if [ "$(basename "$t")" = gpu_two_devices ] && [ "${gpus:-0}" -lt 2 ]; then
    echo "=== test binary gpu_two_devices: skipped (needs two GPUs, this machine has ${gpus:-0})"
    continue
  fi
  echo "=== test binary $(basename "$t")"
  log=$(mktemp)
  "./$t" --include-ignored 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  counts=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" | tail -n 1)
  if [ -n "$counts" ]; then
    passed=$((passed + ${counts% *}))
    failed=$((failed + ${counts#* }))
  fi
  # A binary that crashed before its summary counts as one failure.
  if [ "$rc" != 0 ] && { [ -z "$counts" ] || [ "${counts#* }" = 0 ]; }; then
    echo "!!! $(basename "$t") exited with $rc"
    failed=$((failed + 1))
  fi
  rm -f "$log"
done
for e in examples/*; do
  echo "=== example $(basename "$e")"
  if "./$e"; then passed=$((passed + 1)); else echo "!!! example $(basename "$e") failed"; failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
