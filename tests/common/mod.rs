//! Helpers shared by the GPU tests.
#![allow(dead_code, unreachable_pub)]

use um::Context;

/// The context of device 0. GPU tests are `#[ignore = "needs a CUDA device"]`; run without a
/// device (`--include-ignored` on a machine without one) they fail here, saying why: a missing
/// GPU never makes a GPU test pass.
pub fn gpu() -> Context {
    match Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) => panic!("this test needs a CUDA device: {e}"),
    }
}

/// `full`, or `small` when `UM_SANITIZE` is set (the GPU run script's sanitizer mode, under
/// which every kernel runs orders of magnitude slower).
pub fn workload(full: usize, small: usize) -> usize {
    if std::env::var_os("UM_SANITIZE").is_some() {
        small
    } else {
        full
    }
}
