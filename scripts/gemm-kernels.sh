#!/usr/bin/env bash
# Where the time of one GEMM shape goes in the C++ baseline and in um's benchmark: at small
# shapes, section 8's ratios against C++ move from run to run, with the raw call from Rust as far
# from C++ as um's, so the questions are whether the two processes get different kernels from
# cuBLAS, who paces the stream, and what um adds within one process (bench/notes.md gives the
# answers measured). On the GPU machine, from the repository root, with target/gpu-bundle carried:
#
#   bash scripts/gemm-kernels.sh [DTYPE M N K [PROCESSES]]   (default: f64 256 256 256 8)
#
# Builds bench/cublas_baseline.cpp, then:
# - runs it and `um_bench --child cublas` in PROCESSES fresh processes each, taking turns, and
#   prints each process's per-call figure and its enqueue time (the host's time per call until
#   the last call returned: near the per-call figure where the host paces the stream); the um
#   process also takes turns with the baseline built as a library (`C++ here`);
# - `um_bench --child cublas-probe` in PROCESSES fresh processes: `Blas::gemm` beside the raw
#   call through the bench's handle, through `Blas`'s handle, and with `Blas::gemm`'s checks,
#   and the C++ baseline's batch in the same process, its handle on um's stream and buffers,
#   and the bench's handle on the C++ side's;
# - under Nsight Compute (`ncu --clock-control none --cache-control none`, where there is one),
#   6 GEMM launches of each after the warm-up: each kernel's name and duration
#   (gpu__time_duration.sum, ns).
set -u
dtype=${1:-f64} m=${2:-256} n=${3:-256} k=${4:-256} procs=${5:-8}
b=$(pwd)/target/gpu-bundle
[ -x "$b/bench/um_bench" ] || { echo "gemm-kernels: no $b/bench/um_bench (carry target/gpu-bundle)"; exit 2; }
export NCCL_NVLS_ENABLE=0
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nvcc" -O3 -o "$tmp/cpp" "$b/bench/cublas_baseline.cpp" -lcublas -lcuda || { echo "gemm-kernels: the C++ baseline did not build"; exit 2; }
# The same baseline as a library, taking turns inside um's fresh processes.
"$nvcc" -O3 -shared -Xcompiler -fPIC -DUM_BASELINE_SHARED -o "$tmp/libcpp.so" "$b/bench/cublas_baseline.cpp" -lcublas -lcuda &&
  export UM_CPP_CUBLAS_LIB=$tmp/libcpp.so
cpp=("$tmp/cpp" gemm "$dtype" "$m" "$n" "$k")
um=("$b/bench/um_bench" --child cublas "$dtype" "$m" "$n" "$k")
echo "== per call in $procs fresh processes each, taking turns (µs, median of 5 samples of 1000 calls; enqueue: until the last call returned)"
for i in $(seq "$procs"); do
  "${cpp[@]}" 1000 5 | python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); print("  C++   per call %8.3f  enqueue %8.3f" % (d["median_us"], d["enqueue_us"]))'
  "${um[@]}" 1000 | python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); print("  um    per call %8.3f  enqueue %8.3f   raw per call %8.3f  enqueue %8.3f" % (d["median"], d["enqueue"], d["raw_median"], d["raw_enqueue"]) + ("   C++ here %8.3f  enqueue %8.3f  um/C++ %.3f" % (d["cpp_median"], d["cpp_enqueue"], d["median"] / d["cpp_median"]) if "cpp_median" in d else ""))'
done
echo "== where um's host time goes: per call (enqueue) µs in $procs fresh processes, 9 batches of 1000 calls each, taking turns"
echo "   um: Blas::gemm; raw: the bench's handle; um handle: the raw call through Blas's handle; checks: raw plus Blas::gemm's checks;"
echo "   cpp: the C++ baseline's batch in the same process; cpp_on_um: its handle on um's stream and buffers; raw_on_cpp: the bench's handle on the C++ stream and buffers"
for i in $(seq "$procs"); do
  "$b/bench/um_bench" --child cublas-probe "$dtype" "$m" "$n" "$k" 1000 | python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); print("  " + "   ".join("%s %.3f (%.3f)" % (v, d[v], d[v + "_enqueue"]) for v in d if not v.endswith("_enqueue")))'
done
# Under ncu, um's process runs its own calls only. GEMM_KERNELS_NCU=0 skips this part.
unset UM_CPP_CUBLAS_LIB
if [ "${GEMM_KERNELS_NCU:-1}" = 0 ]; then
  exit 0
fi
if [ -z "$ncu" ]; then
  echo "gemm-kernels: no ncu here: no kernel names"
  exit 0
fi
for who in cpp um; do
  if [ "$who" = cpp ]; then cmd=("${cpp[@]}" 8 3); else cmd=("${um[@]}" 8); fi
  echo "== $who: kernels of launches 11 to 16 (name, duration ns)"
  "$ncu" --clock-control none --cache-control none --launch-skip 10 --launch-count 6 \
    --metrics gpu__time_duration.sum --csv "${cmd[@]}" >"$tmp/$who.csv" 2>"$tmp/$who.err"
  python3 - "$tmp/$who.csv" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
# The program's own output comes first (its JSON line has commas): the table starts at its header.
at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if at is None:
    print("  no profile rows")
    sys.exit()
head, rows = rows[at], rows[at:]
name, value = head.index("Kernel Name"), head.index("Metric Value")
for r in rows[1:]:
    print(f"  {r[value]:>10}  {r[name][:160]}")
EOF
  tail -3 "$tmp/$who.err" | sed 's/^/  (ncu) /'
done
