//! Helpers of the generated launchers: counts from buffers, and the default grid.

use um_core::{Error, LaunchConfig, Result, Stream, StreamKind};

/// Threads per block of the default configuration.
pub const BLOCK: u32 = 256;
/// Blocks per multiprocessor at most in the default configuration (grid-stride loops cover the
/// rest).
pub const BLOCKS_PER_SM: u32 = 32;

/// The common length of a launch's buffers, `(name, len)` in parameter order.
pub fn common_len(kernel: &'static str, buffers: &[(&'static str, usize)]) -> Result<usize> {
    let Some(&(first, expected)) = buffers.first() else {
        return Ok(0);
    };
    match buffers.iter().find(|(_, len)| *len != expected) {
        None => Ok(expected),
        Some(&(buffer, len)) => Err(Error::LengthMismatch {
            kernel,
            first,
            expected,
            buffer,
            len,
        }),
    }
}

/// `n` as the kernel's count type, or an error if it does not fit.
pub fn count<T: TryFrom<usize>>(kernel: &'static str, param: &'static str, n: usize) -> Result<T> {
    T::try_from(n).map_err(|_| Error::LengthTooLarge {
        kernel,
        param,
        len: n,
    })
}

/// The default configuration for `n` elements: blocks of [`BLOCK`] threads, one thread per
/// element up to [`BLOCKS_PER_SM`] blocks per multiprocessor. Never an empty grid: buffers are
/// never empty (`Error::ZeroSized` at allocation), and `n = 0` would still get one block.
pub fn grid_for<K: StreamKind>(stream: &Stream<'_, K>, n: usize) -> LaunchConfig {
    let cap = stream.context().info().multiprocessors.max(1) * BLOCKS_PER_SM;
    let blocks = u32::try_from(n.div_ceil(BLOCK as usize)).unwrap_or(u32::MAX);
    LaunchConfig::linear(blocks.clamp(1, cap), BLOCK)
}
