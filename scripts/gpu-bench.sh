#!/usr/bin/env bash
# Runs on the GPU machine (scripts/gpu-bundle.sh makes the bundle): builds the C++ baseline
# with nvcc and runs every benchmark in one process, the C++ runs interleaved. Sections 8, 11
# and 12 also load the C++ baselines built as shared libraries (UM_CPP_*_LIB, below) and take
# turns with them inside um's processes (benches/um_bench/cpp_lib.rs). Writes the
# repository's files at their own paths under OUT: OUT/docs/performance.md,
# OUT/docs/performance-results.json, OUT/docs/img/run_task.svg and OUT/docs/img/mirror.svg, so
# `cp -r OUT/docs .` updates them all (see docs/performance.md). OUT is taken relative to the
# directory the script is called from. The page is rewritten after every scenario, so a run
# cut short keeps what it measured. Mirrored memory (section 6) adds an estimated 2 to 2.5
# minutes to the run (estimated from iteration counts and allocation sizes, not yet timed);
# cuBLAS (section 8, `--only cublas` alone) an estimated 3 to 5 minutes, plus about 1.5 for its
# fresh-process runs of um (not yet timed).
# Sections 12 (stream-ordered allocation, `--only alloc`) and 13 (device-only storage,
# `--only device`) an estimated 2 to 3 minutes together (not yet timed); their C++ side is
# bench/baseline.cpp's `alloc`, `scratch` and `run_task explicit` modes, built below.
#
# Section 10 (NCCL all-reduce) runs where two or more GPUs and NCCL exist, and says "skipped" in
# one line elsewhere. To measure some sections again and keep the rest of the last full run's
# page (bench/performance.md in the bundle), e.g. section 10 alone:
#   bench.sh OUT --only nccl --base bench/performance.md
# Each measured section replaces the same section of the base, and a line under the header says
# what was measured where and when; this run's records go to OUT/results-of-this-run.json. One
# NCCL section per GPU count: run it on the 2-GPU and the 4-GPU machine in turn, the second with
# --base set to the first's OUT/docs/performance.md.
set -euo pipefail
out=${1:?usage: bench.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# The arguments after OUT go to um_bench, which runs from the bundle folder: a `--base` page
# named relative to the caller's folder (target/gpu-bundle/bench/performance.md from the
# repository root) is made absolute first; one relative to the bundle (bench/performance.md)
# stays as it is.
extra=()
prev=""
for a in "${@:2}"; do
  if [ "$prev" = --base ] && [ -f "$a" ]; then
    a=$(cd "$(dirname "$a")" && pwd)/$(basename "$a")
  fi
  extra+=("$a")
  prev=$a
done
cd "$(dirname "${BASH_SOURCE[0]}")"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
# NVLink multicast stays off in every environment this script sets.
export NCCL_NVLS_ENABLE=0
tmp=$(mktemp -d)
baseline=$tmp/um_baseline
"$nvcc" -O3 -cudart none -o "$baseline" bench/baseline.cpp -lcuda
# The same baseline as a shared library, whose allocation batches take turns with um's in one
# process (section 12a; benches/um_bench/cpp_lib.rs): found by this variable.
if "$nvcc" -O3 -cudart none -shared -Xcompiler -fPIC -DUM_BASELINE_SHARED -o "$tmp/libum_baseline.so" \
  bench/baseline.cpp -lcuda; then
  export UM_CPP_BASELINE_LIB=$tmp/libum_baseline.so
else
  echo "bench.sh: bench/baseline.cpp did not build as a library: section 12a compares processes" >&2
fi
# Section 8's C++ baseline (cuBLAS on cuMemAlloc memory). The toolkit's lib64 goes into its
# rpath, so it runs whether or not that folder is on the loader's path. Without cuBLAS the
# scenario runs without it (and um_bench says so).
cublas_baseline=$(dirname "$baseline")/um_cublas_baseline
cublas_args=()
if "$nvcc" -O3 -o "$cublas_baseline" bench/cublas_baseline.cpp -lcublas -lcuda \
  -Xlinker -rpath -Xlinker "$(dirname "$nvcc")/../lib64"; then
  cublas_args=(--cublas-cpp "$cublas_baseline")
  # The same baseline as a shared library, whose batches take turns with um's in one process
  # (benches/um_bench/cpp_lib.rs): um_bench and its fresh processes find it by this variable.
  if "$nvcc" -O3 -shared -Xcompiler -fPIC -DUM_BASELINE_SHARED -o "$tmp/libum_cublas_baseline.so" \
    bench/cublas_baseline.cpp -lcublas -lcuda -Xlinker -rpath -Xlinker "$(dirname "$nvcc")/../lib64"; then
    export UM_CPP_CUBLAS_LIB=$tmp/libum_cublas_baseline.so
  else
    echo "bench.sh: the C++ cuBLAS baseline did not build as a library: section 8 compares processes" >&2
  fi
else
  echo "bench.sh: bench/cublas_baseline.cpp did not build (no cuBLAS?): section 8 runs without C++" >&2
fi
# The NCCL baseline: -lnccl needs the development link (libnccl.so); where only the runtime
# library is installed, link its soname directly.
nccl_args=()
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" -ge 2 ]; then
  nb=$tmp/nccl_baseline
  if "$nvcc" -O3 -o "$nb" bench/nccl_baseline.cpp -lnccl -lcuda 2>"$tmp/nccl_build.log" ||
    "$nvcc" -O3 -o "$nb" bench/nccl_baseline.cpp -l:libnccl.so.2 -lcuda 2>>"$tmp/nccl_build.log"; then
    nccl_args=(--nccl-cpp "$nb")
  else
    echo "bench.sh: the NCCL baseline did not build (section 10 runs without it):" >&2
    tail -n 5 "$tmp/nccl_build.log" >&2
  fi
fi
# Section 11's C++ program (conjugate gradient with cuSPARSE and cuBLAS), beside the example
# it is compared with. Without the libraries the section says it was skipped.
cg_args=()
if "$nvcc" -O3 -o "$tmp/cg_baseline" bench/cg_baseline.cpp -lcusparse -lcublas \
  -Xlinker -rpath -Xlinker "$(dirname "$nvcc")/../lib64" 2>"$tmp/cg_build.log"; then
  cg_args=(--cg-cpp "$tmp/cg_baseline" --cg-um ./examples/conjugate_gradient)
  # The same program as a shared library, whose solve takes turns with the example's in one
  # process (section 11a): found by this variable.
  if "$nvcc" -O3 -shared -Xcompiler -fPIC -DUM_BASELINE_SHARED -o "$tmp/libum_cg_baseline.so" \
    bench/cg_baseline.cpp -lcusparse -lcublas -Xlinker -rpath -Xlinker "$(dirname "$nvcc")/../lib64" \
    2>>"$tmp/cg_build.log"; then
    export UM_CPP_CG_LIB=$tmp/libum_cg_baseline.so
  else
    echo "bench.sh: bench/cg_baseline.cpp did not build as a library (section 11a is skipped):" >&2
    tail -n 5 "$tmp/cg_build.log" >&2
  fi
else
  echo "bench.sh: bench/cg_baseline.cpp did not build (section 11 runs without it):" >&2
  tail -n 5 "$tmp/cg_build.log" >&2
fi
# Section 9's C++ program (CUDA graphs).
graph_baseline=$(dirname "$baseline")/graph_baseline
"$nvcc" -O3 -cudart none -o "$graph_baseline" bench/graph_baseline.cpp -lcuda
UM_BENCH_DATE=$(date -u +%F) ./bench/um_bench --out "$out" --cpp "$baseline" --graph-cpp "$graph_baseline" ${cublas_args[@]+"${cublas_args[@]}"} ${nccl_args[@]+"${nccl_args[@]}"} ${cg_args[@]+"${cg_args[@]}"} --notes bench/notes.md ${extra[@]+"${extra[@]}"}
