//! # um: CUDA unified memory whose ownership the compiler checks
//!
//! The facade of the workspace: it re-exports [`um_core`] (managed memory as a typestate,
//! streams, contexts, launches) at the top level, [`um_kernels`] as [`kernels`], and
//! [`um_nccl`] (NCCL collectives on owned buffers, loaded at run time) as [`nccl`].
//! The top-level `examples/` and `tests/` belong to this package.

pub use um_core::*;
pub use um_kernels as kernels;
pub use um_nccl as nccl;
