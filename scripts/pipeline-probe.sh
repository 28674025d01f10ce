#!/usr/bin/env bash
# The pipeline probe, on the GPU machine: builds bench/pipeline_probe.cu (CUDA C++,
# no um) with nvcc and runs it for stages of 10 and 100 us. Writes OUT/pipeline_probe.jsonl.
#
#   bash DIR/pipeline-probe/probe.sh OUT [BATCHES]
set -euo pipefail
out=${1:?usage: probe.sh OUT [BATCHES]}
batches=${2:-200}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
exe=$(mktemp -d)/pipeline_probe
"$nvcc" -O2 -o "$exe" pipeline_probe.cu
for us in 10 100; do
  "$exe" "$batches" "$us" | tee -a "$out/pipeline_probe.jsonl"
done
# Does one stream attach slow down every later launch of the process? The variants without an
# attach, first in a fresh process, then after the attaching variants (each line says which).
for order in device,global attach_ab,device,global; do
  "$exe" "$batches" 10 "$order" | sed "s/^{/{\"order\":\"$order\",/" | tee -a "$out/pipeline_order.jsonl"
done
