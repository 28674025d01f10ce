#![doc = include_str!("../README.md")]
//!
//! ## What is where
//!
//! * Memory: [`Managed`], its states ([`HostOwned`], [`StreamOwned`]) and storages
//!   ([`storage`]).
//! * Devices and streams: [`Context`], [`Stream`], [`StreamOptions`].
//! * Launches: the launchers that [`include_kernels!`] brings in; [`Linear`] for
//!   one-dimensional launches; [`Stream::launch`] and [`LaunchConfig`] for raw, `unsafe`
//!   launches.
//! * [`kernels`]: um's own kernels, with their launchers (for example
//!   [`kernels::run_task::transform`]).
//! * Device copies, fills and timing on a stream's own buffers: [`Stream::copy`],
//!   [`Stream::fill`], [`Stream::mark_time`] and [`TimeSpan`].
//! * Errors: [`Error`], [`Result`].
//!
//! * Libraries on owned buffers: [`cublas`] (GEMM, GEMV, level 1), [`cusparse`] (SpMV and SpMM
//!   on a proved CSR matrix), [`curand`] (random numbers on the owning stream) and [`nccl`]
//!   (collectives across GPUs and processes), each loaded at run time, so that building needs
//!   none of them.
//!
//! This library re-exports the crates `um-core` (its API at the top level, listed in this
//! file), `um-kernels` (as [`kernels`]), `um-cublas` (as [`cublas`]), `um-cusparse` (as
//! [`cusparse`]), `um-curand` (as [`curand`]) and `um-nccl` (as [`nccl`]). [`prelude`] holds
//! what most programs name: `use um::prelude::*;`.

pub use um_core::{
    Attachable, ByValue, Capture, CaptureSet, Coherent, CoherentManaged, Context, ContextOptions,
    Created, Device, DeviceCopy, DeviceInfo, DeviceManaged, DevicePtr, DevicePtrMut, Eager,
    Elapsed, Error, ErrorKind, Foreign, Graph, HostAccess, HostOwned, HostViews, HostVisible,
    Kernel, KernelArg, KernelArgs, LaunchConfig, Legacy, LibrarySearch, Linear, Managed, MemPool,
    Mirror, MirroredManaged, Module, Node, PINNED_WORD_BYTES, PerThread, PinnedWord, Poisoner,
    Pooled, PooledManaged, Result, Scalars, State, Storage, Stream, StreamKind, StreamOptions,
    StreamOrder, StreamOwned, SyncAllFuture, SyncFuture, SyncGroup, TimeMark, TimeSpan, Transfer,
    Unified, Zeroable, capturing_on_this_thread, defer_while_capturing, device_count,
    include_kernels, ptx_isa_version, reap_pending, refuse_inside_capture,
    refuse_inside_stream_callback, relaxed_while_capturing, state, storage,
};

/// The CPU model of the driver, in place of a GPU (feature `model`, for tests only): the
/// violations of um's rules it saw, and the CPU twins of a crate's own kernels. See
/// docs/gpu-testing.md, "Your own tests on the model".
#[cfg(feature = "model")]
pub use um_core::model;

// bytemuck's page of it links items um does not re-export: listed as a re-export, not inlined.
#[doc(no_inline)]
pub use um_core::{AnyBitPattern, NoUninit};

// Named in the compiler's errors only (um-core says why): public, so that the errors name them
// by their short names.
#[doc(hidden)]
pub use um_core::{CaptureStaysOnItsThread, PerThreadStreamIsThreadLocal};

pub mod prelude {
    //! What most programs name, for `use um::prelude::*;`: a device and its streams, managed
    //! memory in its two states and four storages, launch geometry, graphs, errors.
    //!
    //! ```no_run
    //! use um::prelude::*;
    //!
    //! fn main() -> Result<()> {
    //!     let ctx = Context::new(0)?;
    //!     let x: Managed<[f32], HostOwned> = Managed::from_slice(&ctx, &[1.0, 2.0])?;
    //!     let x = ctx.with_stream(StreamOptions::new(), |s| x.attach(s)?.sync())?;
    //!     assert_eq!(x[1], 2.0);
    //!     Ok(())
    //! }
    //! ```
    pub use um_core::{
        Coherent, Context, Device, Error, ErrorKind, Graph, HostOwned, Linear, Managed, Mirror,
        Result, Stream, StreamOptions, StreamOwned, Transfer, Unified,
    };
}
#[doc(inline)]
pub use um_cublas as cublas;
#[doc(inline)]
pub use um_curand as curand;
#[doc(inline)]
pub use um_cusparse as cusparse;
#[doc(inline)]
pub use um_kernels as kernels;
#[doc(inline)]
pub use um_nccl as nccl;
