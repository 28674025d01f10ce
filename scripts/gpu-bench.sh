#!/usr/bin/env bash
# Runs on the GPU machine (scripts/gpu-bundle.sh makes the bundle): builds the C++ baseline
# with nvcc and runs every benchmark in one process, the C++ runs interleaved. Writes the
# repository's files at their own paths under OUT: OUT/docs/performance.md,
# OUT/docs/performance-results.json, OUT/docs/img/run_task.svg and OUT/docs/img/mirror.svg, so
# `cp -r OUT/docs .` updates them all (see docs/performance.md). OUT is taken relative to the
# directory the script is called from. The page is rewritten after every scenario, so a run
# cut short keeps what it measured. Mirrored memory (section 6) adds an estimated 2 to 2.5
# minutes to the run (estimated from iteration counts and allocation sizes, not yet timed).
set -euo pipefail
out=${1:?usage: bench.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
baseline=$(mktemp -d)/um_baseline
"$nvcc" -O3 -cudart none -o "$baseline" bench/baseline.cpp -lcuda
# Section 8's C++ program (CUDA graphs, issue 24).
graph_baseline=$(dirname "$baseline")/graph_baseline
"$nvcc" -O3 -cudart none -o "$graph_baseline" bench/graph_baseline.cpp -lcuda
UM_BENCH_DATE=$(date -u +%F) ./bench/um_bench --out "$out" --cpp "$baseline" --graph-cpp "$graph_baseline" --notes bench/notes.md "${@:2}"
