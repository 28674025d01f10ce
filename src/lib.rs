//! # um: CUDA unified memory whose ownership the compiler checks
//!
//! The facade of the workspace: it re-exports [`um_core`] (managed memory as a typestate,
//! streams, contexts, launches) at the top level and [`um_kernels`] as [`kernels`].
//! The top-level `examples/` and `tests/` belong to this package.

pub use um_core::*;
pub use um_kernels as kernels;
