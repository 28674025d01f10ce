//! The GPU tests that need two devices or more, one module per feature: NCCL's collectives on
//! owned buffers (`gpu_nccl`, which starts ranks as processes of this binary) and memory across
//! devices (`gpu_two_devices`). `#[ignore]`d without the devices: run them with
//! `--include-ignored`. They hold the binary's lock (`common::serial`), one test at a time.

#[path = "../common/mod.rs"]
mod common;

mod gpu_nccl;
mod gpu_two_devices;
