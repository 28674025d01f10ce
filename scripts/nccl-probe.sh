#!/usr/bin/env bash
# On a GPU machine with two or more GPUs, from the repository root, the bundle built:
#   bash scripts/nccl-probe.sh OUT
# Where the NCCL benchmark's small-size gap comes from: the C++ baseline and
# bench/nccl_probe (the baseline's loop from Rust, the process set up raw or by um piece by
# piece), each a fresh process, same sizes; NCCL's own log of the two ends kept in OUT.
set -u
out=${1:?usage: nccl-probe.sh OUT}
mkdir -p "$out"
b=target/gpu-bundle
export NCCL_NVLS_ENABLE=0
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
sizes=8,65536,1048576,4194304,8388608,16777216
"$nvcc" -O3 -o /tmp/nccl_baseline bench/nccl_baseline.cpp -l:libnccl.so.2 -lcuda 2>"$out/nvcc.log" || tail "$out/nvcc.log"
for round in 1 2; do
  echo "== round $round"
  echo '{"setup":"C++"}'; /tmp/nccl_baseline allreduce --sizes $sizes
  for v in "--ctx raw --comm raw" "--ctx um --comm raw" "--ctx raw --comm um" "--ctx um --comm um" "--ctx um --comm um --also-nonblocking"; do
    # shellcheck disable=SC2086
    timeout 120 "$b/bench/nccl_probe" $v --sizes $sizes
  done
  for m in streams mirrors group; do
    timeout 120 "$b/bench/nccl_probe" --comm um --um $m --sizes $sizes
  done
  # One collective on unified memory first (2x H200, 2026-11-22: 1 MiB went from 13.5 to
  # 118.5 us per step); unified memory used by a kernel only; coherent memory.
  for t in unified managed-only coherent; do
    echo "== --touch $t"
    timeout 120 "$b/bench/nccl_probe" --ctx um --comm um --touch $t --sizes $sizes
  done
done 2>&1 | tee "$out/probe.txt"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV,P2P /tmp/nccl_baseline allreduce --sizes 8,1048576 >"$out/debug-cpp.txt" 2>&1
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV,P2P timeout 120 "$b/bench/nccl_probe" --ctx um --comm um --sizes 8,1048576 >"$out/debug-um.txt" 2>&1
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV,P2P timeout 120 "$b/bench/nccl_probe" --ctx raw --comm raw --sizes 8,1048576 >"$out/debug-raw.txt" 2>&1
wc -l "$out"/debug-*.txt
