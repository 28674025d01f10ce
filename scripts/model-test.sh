#!/usr/bin/env bash
# um's GPU tests (tests/gpu) on um-core's CPU model of the driver (`--features model`), on a
# machine without a GPU (docs/gpu-testing.md, "The CPU model"). In a target folder of its own
# (target/model), so that the feature leaves the main build's cache alone. Extra arguments go to
# the test binary (a filter: `scripts/model-test.sh gpu_handoff::`).
#
# Skipped here, with the reason: what needs a real library or calls one directly (cuBLAS,
# cuRAND, cuSPARSE, NCCL, cudarc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
skips=(
    # Whole modules: a real library on every test.
    gpu_cublas:: gpu_curand:: gpu_cusparse:: gpu_interop::
    # cuBLAS inside a test of another rule.
    blas
    gpu_idle_sections::two_workers_meeting_at_a_barrier_inside_the_idle_section_do_not_deadlock
    gpu_teardown::exiting_inside_a_capture_closure_runs_thread_local_destructors_that_neither_wait_nor_abort_and_leaks_what_they_hold
)
args=()
for s in "${skips[@]}"; do
    args+=(--skip "$s")
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/model}"
# The CPU twins of the kernels loop over every element: optimized, or the large tests take minutes.
cargo test -q --config "profile.dev.package.um-core.opt-level=3" --features model --test gpu -- --include-ignored --test-threads 1 "${args[@]}" "$@"
