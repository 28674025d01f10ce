#!/usr/bin/env bash
# um's GPU tests on um-core's CPU model of the driver (`--features model`), on a machine without a
# GPU (docs/gpu-testing.md, "The CPU model"): the binaries tests/gpu, tests/gpu_devices (its
# two-device module) and tests/gpu_faults, on a model of two devices (`UM_MODEL_DEVICES`, 2 unless
# set: the tests that need a second device run instead of skipping). In a target folder of its own
# (target/model), so that the feature leaves the main build's cache alone. Extra arguments go to
# every test binary (a filter: `scripts/model-test.sh gpu_handoff::`).
#
# Skipped here, with the reason: what needs a real library or calls one directly (cuBLAS,
# cuRAND, cuSPARSE, NCCL, cudarc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
skips=(
    # Whole modules: a real library on every test.
    gpu_cublas:: gpu_curand:: gpu_cusparse:: gpu_interop:: gpu_nccl::
    # cuBLAS inside a test of another rule.
    blas
    gpu_idle_sections::two_workers_meeting_at_a_barrier_inside_the_idle_section_do_not_deadlock
    gpu_teardown::exiting_inside_a_capture_closure_runs_thread_local_destructors_that_neither_wait_nor_abort_and_leaks_what_they_hold
    # cudarc's own context of device 1 (libcuda itself).
    gpu_two_devices::a_foreign_stream_of_another_device_is_refused
    # A cuRAND generator of device 1.
    gpu_two_devices::a_generator_of_device_1_is_refused_inside_a_capture_of_device_0_which_stays_valid
)
args=()
for s in "${skips[@]}"; do
    args+=(--skip "$s")
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/model}"
export UM_MODEL_DEVICES="${UM_MODEL_DEVICES:-2}"
# The CPU twins of the kernels loop over every element: optimized, or the large tests take minutes.
cargo test -q --config "profile.dev.package.um-core.opt-level=3" --features model \
    --test gpu --test gpu_devices --test gpu_faults \
    -- --include-ignored --test-threads 1 "${args[@]}" "$@"
