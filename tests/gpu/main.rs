//! The GPU tests of one device, one module per feature (each module's file opens with the rule
//! it shows; `docs/rules.md` cites its tests as `<module>::<test>`). Every test needs a CUDA
//! device and is `#[ignore]`d without one: run them with `--include-ignored`. They hold one
//! lock, the binary's (`common::serial`), so that they run one at a time whatever
//! `--test-threads` says: several measure the device's free memory, time a wait, switch um's
//! waits process-wide or expect no other capture on the device. `run.sh` runs each module as a
//! program of its own (`tests/gpu --include-ignored gpu_async::`).

#[path = "../common/mod.rs"]
mod common;

mod gpu_async;
mod gpu_bad_input;
mod gpu_capture_frees;
mod gpu_coherent;
mod gpu_copies;
mod gpu_cublas;
mod gpu_curand;
mod gpu_cusparse;
mod gpu_device_storage;
mod gpu_graphs;
mod gpu_handoff;
mod gpu_idle_sections;
mod gpu_interop;
mod gpu_kernels;
mod gpu_launch_geometry;
mod gpu_mirrored;
mod gpu_no_concurrent_access;
mod gpu_ownership;
mod gpu_pinned_word;
mod gpu_poison;
mod gpu_smoke;
mod gpu_stream_alloc;
mod gpu_stress;
mod gpu_teardown;
mod gpu_timing;
