#!/usr/bin/env bash
# The NCCL GPU runs in one call of the device tool, from the repository root on a machine with
# two or more GPUs, with target/gpu-bundle carried:
#
#   bash scripts/nccl-call.sh OUT [BUDGET_S]
#
# Execs the bundle's `um-xtask nccl-call` (xtask/src/nccl_call.rs says which steps it runs,
# NCCL_CALL_STEPS, the budget, OUT/summary.txt and the exit status): the GPU machine has no
# Rust, so scripts/gpu-bundle.sh builds it here.
b=$(pwd)/target/gpu-bundle
[ -x "$b/um-xtask" ] || { echo "nccl-call: no $b/um-xtask (build it with scripts/gpu-bundle.sh and carry it)"; exit 2; }
exec "$b/um-xtask" nccl-call "$@"
