//! `Linear`: the launch geometry of every safe launcher, one-dimensional by construction.
//!
//! The kernels that safe launchers may run index with `blockIdx.x * blockDim.x + threadIdx.x`
//! and stride by `blockDim.x * gridDim.x` ([`docs/kernels.md`](https://github.com/um-rs/um/blob/main/docs/kernels.md)). Under a grid or block with a y or
//! z extent, several threads would share one index and race on it. `Linear` has no y or z to
//! set, and its fields are private, so every value of it is a launch under which each thread's
//! global index is distinct and fits in 31 bits:
//!
//! * at least one block of at least one thread;
//! * at most [`Linear::MAX_THREADS_PER_BLOCK`] threads per block (every CUDA device's limit);
//! * at most [`Linear::MAX_THREADS`] threads in all, so that `blockIdx.x * blockDim.x +
//!   threadIdx.x` cannot wrap, in `unsigned int` nor in `int`;
//! * no dynamic shared memory: a kernel written for some size of it would read out of bounds
//!   under another, and a safe launcher cannot know which it was written for.
//!
//! The 3-D [`LaunchConfig`](crate::LaunchConfig) remains for `unsafe` launches.

use crate::driver::stream::{Stream, StreamKind};
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;

/// A one-dimensional launch: `blocks` blocks of `threads_per_block` threads, no dynamic shared
/// memory. Only [`Linear::new`] and [`Linear::for_len`] make one, and both keep the invariants
/// in the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Linear {
    blocks: u32,
    threads_per_block: u32,
}

impl Linear {
    /// Threads per block at most: the limit of every CUDA device since compute capability 2.0.
    /// A kernel compiled with fewer (`__launch_bounds__`, or too many registers) is refused by
    /// the driver at launch, as an `Err`.
    pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
    /// Threads in the whole grid at most: `i32::MAX`, so a global index never wraps, whether the
    /// kernel computes it as `int` or as `unsigned int`.
    pub const MAX_THREADS: u64 = i32::MAX as u64;
    /// Threads per block of [`Linear::for_len`].
    pub const DEFAULT_THREADS_PER_BLOCK: u32 = 256;
    /// Blocks per multiprocessor at most in [`Linear::for_len`]; a grid-stride loop covers the
    /// rest of the elements.
    pub const DEFAULT_BLOCKS_PER_SM: u32 = 32;

    /// `blocks` blocks of `threads_per_block` threads, or [`Error::InvalidGeometry`] if either
    /// is zero, a block is larger than [`Linear::MAX_THREADS_PER_BLOCK`], or the grid has more
    /// than [`Linear::MAX_THREADS`] threads.
    pub fn new(blocks: u32, threads_per_block: u32) -> Result<Linear> {
        match Self::refusal(blocks, threads_per_block) {
            None => Ok(Linear {
                blocks,
                threads_per_block,
            }),
            Some(reason) => Err(Error::InvalidGeometry {
                blocks,
                threads_per_block,
                reason,
            }),
        }
    }

    /// Why a geometry is not a `Linear`, or `None` when it is one.
    const fn refusal(blocks: u32, threads_per_block: u32) -> Option<&'static str> {
        if blocks == 0 || threads_per_block == 0 {
            Some("a launch needs at least one block of at least one thread")
        } else if threads_per_block > Self::MAX_THREADS_PER_BLOCK {
            Some("more than 1024 threads per block: no CUDA device runs such a block")
        } else if blocks as u64 * threads_per_block as u64 > Self::MAX_THREADS {
            Some("more than 2^31 - 1 threads in the grid: a thread's global index would wrap")
        } else {
            None
        }
    }

    /// The default launch for `n` elements on `stream`'s device: blocks of
    /// [`Linear::DEFAULT_THREADS_PER_BLOCK`] threads, one thread per element, at most
    /// [`Linear::DEFAULT_BLOCKS_PER_SM`] blocks per multiprocessor, and at least one block.
    pub fn for_len<K: StreamKind>(stream: &Stream<'_, K>, n: usize) -> Linear {
        let sms = stream.context().info().multiprocessors.max(1);
        let cap = sms.saturating_mul(Self::DEFAULT_BLOCKS_PER_SM);
        let wanted = n.div_ceil(Self::DEFAULT_THREADS_PER_BLOCK as usize);
        let max_blocks = (Self::MAX_THREADS / Self::DEFAULT_THREADS_PER_BLOCK as u64) as u32;
        let blocks = u32::try_from(wanted)
            .unwrap_or(u32::MAX)
            .clamp(1, cap.clamp(1, max_blocks));
        Linear {
            blocks,
            threads_per_block: Self::DEFAULT_THREADS_PER_BLOCK,
        }
    }

    /// [`Linear::new`] for constants: `None` where `new` returns an error.
    ///
    /// ```
    /// use um_core::Linear;
    /// const ONE_BLOCK: Linear = match Linear::checked(1, 64) {
    ///     Some(l) => l,
    ///     None => panic!("not a valid launch"), // a compile error, never a run-time panic
    /// };
    /// assert_eq!(ONE_BLOCK.total_threads(), 64);
    /// ```
    pub const fn checked(blocks: u32, threads_per_block: u32) -> Option<Linear> {
        match Self::refusal(blocks, threads_per_block) {
            None => Some(Linear {
                blocks,
                threads_per_block,
            }),
            Some(_) => None,
        }
    }

    /// Blocks in the grid.
    pub const fn blocks(&self) -> u32 {
        self.blocks
    }

    /// Threads per block.
    pub const fn threads_per_block(&self) -> u32 {
        self.threads_per_block
    }

    /// Threads in the whole grid (at most [`Linear::MAX_THREADS`]).
    pub const fn total_threads(&self) -> u64 {
        self.blocks as u64 * self.threads_per_block as u64
    }
}

impl From<Linear> for LaunchConfig {
    fn from(l: Linear) -> LaunchConfig {
        LaunchConfig::grid_1d(l.blocks, l.threads_per_block)
    }
}

#[cfg(test)]
mod tests {
    use super::Linear;
    use crate::error::Error;
    use crate::launch::LaunchConfig;

    #[test]
    fn only_launches_with_distinct_31_bit_indices_exist() {
        let ok = Linear::new(64, 1).expect("64 blocks of 1");
        assert_eq!((ok.blocks(), ok.threads_per_block()), (64, 1));
        assert_eq!(
            LaunchConfig::from(ok),
            LaunchConfig {
                grid: (64, 1, 1),
                block: (1, 1, 1),
                shared_mem_bytes: 0
            }
        );
        // The largest grids that still fit in 31 bits.
        assert!(Linear::new(i32::MAX as u32, 1).is_ok());
        assert!(Linear::new((1 << 21) - 1, 1024).is_ok());
        for (blocks, threads) in [
            (0, 1),
            (1, 0),
            (1, 1025),
            (1 << 21, 1024),
            (u32::MAX, 1),
            (u32::MAX, 1024),
            (i32::MAX as u32 + 1, 1),
        ] {
            match Linear::new(blocks, threads) {
                Err(Error::InvalidGeometry {
                    blocks: b,
                    threads_per_block: t,
                    ..
                }) => assert_eq!((b, t), (blocks, threads)),
                other => panic!("({blocks}, {threads}) gave {other:?}"),
            }
        }
    }
}
