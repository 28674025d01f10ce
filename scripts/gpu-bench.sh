#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle folder (scripts/gpu-bundle.sh): builds the C++
# baseline with nvcc and runs every benchmark in one process, the C++ runs interleaved. Writes
# OUT/results.json, OUT/performance.md and OUT/run_task.svg; copy them to docs/
# (performance.md) and docs/img/ (run_task.svg), see docs/performance.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out=${1:?usage: bench.sh OUT_DIR}
mkdir -p "$out"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
baseline=$(mktemp -d)/um_baseline
"$nvcc" -O2 -cudart none -o "$baseline" bench/baseline.cpp -lcuda
UM_BENCH_DATE=$(date -u +%F) ./bench/um_bench --out "$out" --cpp "$baseline" --notes bench/notes.md "${@:2}"
