//! A bootstrap's result with how long it took, for the tests of retries across exchanges.

use std::time::{Duration, Instant};

use um_core::Result;

/// What a call returned, and after how long.
pub(crate) type Got = (Result<[u8; 128]>, Duration);

/// Runs `f` and times it.
pub(crate) fn timed(f: impl FnOnce() -> Result<[u8; 128]>) -> Got {
    let t0 = Instant::now();
    let r = f();
    (r, t0.elapsed())
}
