#!/usr/bin/env bash
# UnifiedMemoryStreams side by side, on the GPU machine: builds NVIDIA's original
# cuda-samples source (carried in the bundle's external/ only where .external/ was fetched; it is
# never committed) with nvcc and cuBLAS, patched only to take a fixed seed and to print the time
# of its two phases; then runs it and um's examples/unified_memory_streams alternately, with the
# same seed, ROUNDS times each. Writes OUT/ums_compare.tsv (one line per run) and prints medians.
#
#   bash DIR/external/ums-compare.sh OUT [ROUNDS] [SEED]
#
# Phases, as both programs print them:
#   initialise: allocate every task's managed memory and fill it on the host;
#   execute:    the 4 threads' tasks until every result is complete (the C++ sample ends with
#               cudaDeviceSynchronize; um's example syncs each task back to its host state).
# um's example also checks every task against a host GEMV afterwards; that is not timed here.
set -euo pipefail
out=${1:?usage: ums-compare.sh OUT [ROUNDS] [SEED]}
rounds=${2:-10}
seed=${3:-2022}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bundle=$(cd "$here/.." && pwd)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
work=$(mktemp -d)
src="$work/ums_timed.cu"
# The patch: a seed from UMS_SEED instead of time(NULL), and two timers.
sed -e 's|#include <ctime>|#include <ctime>\n#include <chrono>|' \
    -e 's|int seed = (int)time(NULL);|int seed = getenv("UMS_SEED") ? atoi(getenv("UMS_SEED")) : 2022;|' \
    -e 's|^    initialise_tasks(TaskList);|    auto ums_t0 = std::chrono::steady_clock::now();\n    initialise_tasks(TaskList);\n    double ums_init = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ums_t0).count();\n    auto ums_t1 = std::chrono::steady_clock::now();|' \
    -e 's|^    cudaDeviceSynchronize();|    cudaDeviceSynchronize();\n    printf("timing: initialise %.1f ms, execute %.1f ms\\n", ums_init, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ums_t1).count());|' \
    "$here/UnifiedMemoryStreams.cu" > "$src"
cp "$here"/*.h "$work/"
cuda=/usr/local/cuda
if ! "$nvcc" -O3 -std=c++17 -I"$work" -Xcompiler -fopenmp -o "$work/ums_cpp" "$src" \
     -L"$cuda/lib64" -lcublas -lgomp 2>"$work/build.log"; then
  echo "ums-compare: OpenMP build failed, building the sample's pthreads variant"; cat "$work/build.log"
  "$nvcc" -O3 -std=c++17 -I"$work" -DUSE_PTHREADS -o "$work/ums_cpp" "$src" -L"$cuda/lib64" -lcublas -lpthread
fi
export LD_LIBRARY_PATH="$cuda/lib64:${LD_LIBRARY_PATH:-}"
printf 'program\tround\tinitialise_ms\texecute_ms\twall_ms\tstatus\n' > "$out/ums_compare.tsv"
run() { # name round command...
  local name=$1 round=$2; shift 2
  local t0 t1 log status
  log="$work/$name.$round.log"
  t0=$(date +%s%N)
  if UMS_SEED=$seed "$@" >"$log" 2>&1; then status=ok; else status="exit$?"; fi
  t1=$(date +%s%N)
  local line init exec
  line=$(grep -m1 '^timing:' "$log" || true)
  init=$(sed -n 's/.*initialise \([0-9.]*\) ms.*/\1/p' <<<"$line")
  exec=$(sed -n 's/.*execute \([0-9.]*\) ms.*/\1/p' <<<"$line")
  grep -q 'All Done!' "$log" || status="$status,no-All-Done"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$round" "${init:-NA}" "${exec:-NA}" $(((t1 - t0) / 1000000)) "$status" >> "$out/ums_compare.tsv"
  [ "$round" = 1 ] && cp "$log" "$out/$name.first.log"
  return 0
}
for r in $(seq 1 "$rounds"); do
  run cpp "$r" "$work/ums_cpp"
  run um "$r" "$bundle/examples/unified_memory_streams" --seed "$seed"
done
(column -t "$out/ums_compare.tsv" 2>/dev/null || cat "$out/ums_compare.tsv")
awk -F'\t' 'NR > 1 { k = $1; n[k]++; i[k, n[k]] = $3; e[k, n[k]] = $4; w[k, n[k]] = $5 }
  function med(a, k, c,   j, m, t, v) { for (j = 1; j <= c; j++) v[j] = a[k, j]
    for (j = 1; j <= c; j++) for (m = j + 1; m <= c; m++) if (v[m] < v[j]) { t = v[j]; v[j] = v[m]; v[m] = t }
    return (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2 }
  END { for (k in n) printf "%s: median initialise %.1f ms, execute %.1f ms, wall %.0f ms (%d runs)\n", k, med(i, k, n[k]), med(e, k, n[k]), med(w, k, n[k]), n[k] }' \
  "$out/ums_compare.tsv" | tee "$out/ums_summary.txt"
