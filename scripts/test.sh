#!/usr/bin/env bash
# README's test command: installs the prerequisites (scripts/setup.sh), then runs the whole test
# suite. GPU tests are #[ignore = "needs a CUDA device"] and reported as ignored (skipped) here;
# they run on a GPU machine through the bundle (docs/gpu-testing.md). The last line sums every
# harness's "test result" line: "tests: N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace "$@" 2>&1 | tee "$log"
awk '/^test result:/ {
       for (i = 1; i <= NF; i++) {
         if ($(i+1) ~ /^passed/) p += $i
         if ($(i+1) ~ /^failed/) f += $i
         if ($(i+1) ~ /^ignored/) s += $i
       }
     }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
