#!/usr/bin/env bash
# Which kernels cuBLAS runs for one GEMM shape in the C++ baseline and in um's benchmark, and for
# how long each: section 8 of the performance page finds C++ faster at f64 256³ and um's process
# faster at f32 256³, with the raw call from Rust as slow as um's, so the question is whether
# the two processes get different kernels from cuBLAS. On the GPU machine, from the repository
# root, with target/gpu-bundle carried:
#
#   bash scripts/gemm-kernels.sh [DTYPE M N K]        (default: f64 256 256 256)
#
# Builds bench/cublas_baseline.cpp, then runs it and `um_bench --child cublas` under Nsight
# Compute (`ncu --clock-control none`, the clocks left alone), profiling 6 GEMM launches of each
# after the warm-up, and prints each kernel's name and duration (gpu__time_duration.sum, ns),
# then each program's own per-call figure outside the profiler. Needs ncu on the PATH or in
# /usr/local/cuda/bin; without it, says so and prints the per-call figures only.
set -u
dtype=${1:-f64} m=${2:-256} n=${3:-256} k=${4:-256}
b=$(pwd)/target/gpu-bundle
[ -x "$b/bench/um_bench" ] || { echo "gemm-kernels: no $b/bench/um_bench (carry target/gpu-bundle)"; exit 2; }
export NCCL_NVLS_ENABLE=0
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nvcc" -O3 -o "$tmp/cpp" "$b/bench/cublas_baseline.cpp" -lcublas -lcuda || { echo "gemm-kernels: the C++ baseline did not build"; exit 2; }
cpp=("$tmp/cpp" gemm "$dtype" "$m" "$n" "$k")
um=("$b/bench/um_bench" --child cublas "$dtype" "$m" "$n" "$k")
echo "== per call, outside the profiler (µs): C++ median of 5 samples of 1000 calls; um and raw from Rust, fresh process"
"${cpp[@]}" 1000 5
"${um[@]}" 1000
if [ -z "$ncu" ]; then
  echo "gemm-kernels: no ncu here: no kernel names"
  exit 0
fi
for who in cpp um; do
  if [ "$who" = cpp ]; then cmd=("${cpp[@]}" 8 3); else cmd=("${um[@]}" 8); fi
  echo "== $who: kernels of launches 11 to 16 (name, duration ns)"
  "$ncu" --clock-control none --launch-skip 10 --launch-count 6 \
    --metrics gpu__time_duration.sum --csv "${cmd[@]}" >"$tmp/$who.csv" 2>"$tmp/$who.err"
  python3 - "$tmp/$who.csv" <<'EOF'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if not rows:
    print("  no profile rows")
    sys.exit()
head = rows[0]
name, value = head.index("Kernel Name"), head.index("Metric Value")
for r in rows[1:]:
    print(f"  {r[value]:>10}  {r[name][:160]}")
EOF
  tail -3 "$tmp/$who.err" | sed 's/^/  (ncu) /'
done
