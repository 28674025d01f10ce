#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle folder that scripts/gpu-bundle.sh made: every test
# binary with --include-ignored (GPU tests included), then every example. Each test counts as
# one pass or failure, each example as one; the last line is "N passed, N failed".
# Examples that draw timelines write them to $UM_SVG_DIR when it is set.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")"
passed=0
failed=0
command -v nvidia-smi >/dev/null &&
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.free --format=csv,noheader
for t in tests/*; do
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
