//! # um-core: CUDA managed memory whose ownership the compiler checks
//!
//! CUDA's rules for managed (unified) memory attached to streams are prose: the CPU may touch
//! memory attached to a stream once every operation in that stream has completed; kernels on
//! other streams must not touch it; attaching singly to the NULL stream is illegal; and "no
//! error checking is performed". `um-core` turns them into types:
//!
//! * [`Managed<T, HostOwned>`](Managed): the CPU owns the memory and dereferences it.
//! * [`Managed<T, StreamOwned<'s>>`](Managed): the stream branded `'s` owns it; only kernels
//!   launched on that stream take it, and the CPU has no access at all.
//! * [`attach`](Managed::attach) and [`sync`](Managed::sync) are the only transitions between
//!   the two states, and [`hand_off`](Managed::hand_off) moves stream-owned memory to another
//!   stream without a host wait; all three consume the value. The state machine is in
//!   [`state`], the rules it encodes in [`docs/rules.md`](https://github.com/um-rs/um/blob/main/docs/rules.md).
//!
//! ```no_run
//! # fn main() -> um_core::Result<()> {
//! use um_core::{Context, Managed, StreamOptions};
//!
//! let ctx = Context::new(0)?;
//! let mut data = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0])?;
//! data[0] = 10.0; // host-owned: the CPU may write
//! let data = ctx.with_stream(StreamOptions::new(), |stream| {
//!     let data = data.attach(stream)?; // now stream-owned: no CPU access
//!     // unsafe { stream.launch(&kernel, config, (&mut data, 3u32))? };
//!     data.sync() // waits for the stream; host-owned again
//! })?;
//! assert_eq!(data[0], 10.0);
//! # Ok(()) }
//! ```
//!
//! Touching stream-owned memory on the CPU does not compile:
//!
//! ```compile_fail,E0277
//! # fn f(ctx: &um_core::Context) -> um_core::Result<()> {
//! # use um_core::{Managed, StreamOptions};
//! let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
//! ctx.with_stream(StreamOptions::new(), |stream| {
//!     let data = data.attach(stream)?;
//!     println!("{}", data[0]); // error: owned by a stream, `sync` it first
//!     Ok(())
//! })
//! # }
//! ```
//!
//! Neither does keeping stream-owned memory past its stream:
//!
//! ```compile_fail
//! # fn f(ctx: &um_core::Context) -> um_core::Result<()> {
//! # use um_core::{Managed, StreamOptions};
//! let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
//! let escaped = ctx.with_stream(StreamOptions::new(), |stream| data.attach(stream))?;
//! # Ok(()) }
//! ```
//!
//! Nor attaching memory to the legacy default stream:
//!
//! ```compile_fail,E0277
//! # fn f(ctx: &um_core::Context) -> um_core::Result<()> {
//! # use um_core::Managed;
//! let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
//! ctx.with_legacy_stream(|legacy| {
//!     let data = data.attach(legacy)?;
//!     data.sync().map(drop)
//! })
//! # }
//! ```
//!
//! Nor launching with memory of another stream:
//!
//! ```compile_fail,E0521
//! # fn f(ctx: &um_core::Context, k: &um_core::Kernel) -> um_core::Result<()> {
//! # use um_core::{LaunchConfig, Managed, StreamOptions};
//! let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
//! ctx.with_stream(StreamOptions::new(), |a| {
//!     ctx.with_stream(StreamOptions::new(), |b| {
//!         let mut data = data.attach(a)?;
//!         unsafe { b.launch(k, LaunchConfig::grid_1d(1, 32), (&mut data,)) }?;
//!         data.sync().map(drop)
//!     })
//! })
//! # }
//! ```

// The layers, top first (`docs/design.md`, "Layers"). The order is also the order in which
// rustc lists a sealed trait's implementors in a diagnostic (`tests/ui/sealed/*`): the kernel
// arguments of `launch` come first there.
mod graph;

mod launch;
mod wait;

mod memory;

mod reclaim;

mod driver;

mod error;
mod library_search;
mod sealed;
// The primitives of the concurrency protocols: std's, or loom's in the loom models.
mod sync;

// Counters and switches for um's own tests, examples and benchmarks (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
mod test_hooks;
#[cfg(feature = "test-hooks")]
pub use test_hooks::*;

/// The CPU model of the driver (`--features model`): what a test asks of it, and the CPU twins
/// of a crate's own kernels ([`model::register_kernel`]). See docs/gpu-testing.md, "The CPU
/// model" and "Your own tests on the model".
#[cfg(feature = "model")]
pub mod model {
    pub use crate::driver::model::{
        LaunchArgs, on_model, register_kernel, register_noop_kernel, take_violations,
    };
}

pub use cust::memory::DeviceCopy;
pub use cust::memory::bytemuck::Zeroable;
// bytemuck's page of it links items um does not re-export: listed as a re-export, not inlined.
#[doc(no_inline)]
pub use cust::memory::bytemuck::AnyBitPattern;
#[doc(no_inline)]
pub use cust::memory::bytemuck::NoUninit;
pub use driver::context::{
    Context, DeviceInfo, capturing_on_this_thread, defer_while_capturing, device_count,
    refuse_inside_capture, refuse_inside_stream_callback, relaxed_while_capturing,
};
pub use driver::foreign::Foreign;
pub use driver::module::{Kernel, Module, ptx_isa_version};
pub use driver::options::ContextOptions;
pub use driver::order::StreamOrder;
pub use driver::poison::Poisoner;
pub use driver::pool::MemPool;
pub use driver::stream::{
    Attachable, Capture, Created, Eager, Legacy, PerThread, Stream, StreamKind, StreamOptions,
    Transfer,
};
// Named in the compiler's errors only: a per-thread or capture stream's work moved to another
// thread is refused with "`*const PerThreadStreamIsThreadLocal` cannot be sent between threads
// safely" (public, so that the compiler names them by their short names).
#[doc(hidden)]
pub use driver::stream::{CaptureStaysOnItsThread, PerThreadStreamIsThreadLocal};
pub use driver::timing::{Elapsed, TimeMark, TimeSpan};
pub use error::{Error, ErrorKind, Result};
pub use graph::exec::Graph;
pub use graph::node::{Node, Scalars};
#[doc(hidden)]
pub use launch::codegen;
pub use launch::geometry::Linear;
pub use launch::{ByValue, KernelArg, KernelArgs, LaunchConfig};
pub use library_search::LibrarySearch;
pub use memory::managed::Managed;
pub use memory::pinned_word::{PINNED_WORD_BYTES, PinnedWord};
pub use memory::raw::{DevicePtr, DevicePtrMut};
pub use memory::{state, storage};
pub use reclaim::reaper::reap_pending;
// Listed as re-exports of the public modules `state` and `storage`, not as items of their own.
#[doc(no_inline)]
pub use state::{CaptureSet, HostAccess, HostOwned, HostViews, State, StreamOwned, SyncGroup};
#[doc(no_inline)]
pub use storage::{
    Coherent, CoherentManaged, Device, DeviceManaged, HostVisible, Mirror, MirroredManaged, Pooled,
    PooledManaged, Storage, Unified,
};
pub use wait::futures::{SyncAllFuture, SyncFuture};

/// Includes the kernels and launchers that `um-build` generated in this crate's build script
/// (`$OUT_DIR/um_kernels.rs`): one module per `.cu` file, holding its PTX and a launcher per
/// kernel, plus `ALL_PTX` and `PTX_ARCH`. See [`docs/kernels.md`](https://github.com/um-rs/um/blob/main/docs/kernels.md).
///
/// ```ignore
/// // src/lib.rs (or any module) of a crate whose build.rs runs um_build::Kernels
/// um::include_kernels!();
/// ```
#[macro_export]
macro_rules! include_kernels {
    () => {
        // The crate the generated launchers call (`um-core`, however this crate names it).
        // Private, so that it never shows up as a path in other crates' diagnostics. Not
        // `use $crate as __um;`, which rustc refuses before 1.95 ("`$crate` may not be
        // imported").
        #[allow(unused_imports)]
        use $crate::{self as __um};
        include!(concat!(env!("OUT_DIR"), "/um_kernels.rs"));
    };
}

// The Send/Sync facts the design relies on, checked at compile time.
mod facts {
    use super::*;
    use static_assertions::{assert_impl_all, assert_not_impl_any, const_assert_eq};

    // States are zero-sized markers.
    const_assert_eq!(std::mem::size_of::<HostOwned>(), 0);
    const_assert_eq!(std::mem::size_of::<StreamOwned<'static>>(), 0);
    const_assert_eq!(std::mem::size_of::<StreamOwned<'static, PerThread>>(), 0);

    // A context is shared by threads.
    assert_impl_all!(Context: Send, Sync, Clone);
    assert_impl_all!(Kernel: Send, Sync);

    // Host-owned memory moves between threads with its T.
    assert_impl_all!(Managed<u32, HostOwned>: Send, Sync);
    assert_impl_all!(Managed<[f32], HostOwned>: Send, Sync);

    // Memory owned by a stream of ours follows that stream, which threads may share.
    assert_impl_all!(Stream<'static, Created>: Send, Sync);
    assert_impl_all!(Managed<[f32], StreamOwned<'static, Created>>: Send, Sync);

    // The per-thread default stream names another stream on every thread: neither it nor the
    // memory attached to it may leave its thread.
    assert_not_impl_any!(Stream<'static, PerThread>: Send, Sync);
    assert_not_impl_any!(Managed<[f32], StreamOwned<'static, PerThread>>: Send, Sync);

    // Sync futures follow their memory: a created stream's may move between executor threads,
    // the per-thread stream's may not (it names another stream on another thread).
    assert_impl_all!(SyncFuture<'static, [f32], Created>: Send, Sync);
    assert_impl_all!(SyncAllFuture<'static, Created, Vec<Managed<[f32], StreamOwned<'static>>>>: Send);
    assert_not_impl_any!(SyncFuture<'static, [f32], PerThread>: Send, Sync);
    // Mirrored memory follows the same rules.
    assert_impl_all!(Managed<[f32], HostOwned, Mirror>: Send, Sync);
    assert_impl_all!(Managed<[f32], StreamOwned<'static, Created>, Mirror>: Send, Sync);
    assert_not_impl_any!(Managed<[f32], StreamOwned<'static, PerThread>, Mirror>: Send, Sync);
    // So does coherent memory.
    assert_impl_all!(Managed<[f32], HostOwned, Coherent>: Send, Sync);
    assert_impl_all!(Managed<[f32], StreamOwned<'static, Created>, Coherent>: Send, Sync);
    assert_not_impl_any!(Managed<[f32], StreamOwned<'static, PerThread>, Coherent>: Send, Sync);
    // So does device memory; and the CPU reaches it in no state (copies only).
    assert_impl_all!(Managed<[f32], HostOwned, Device>: Send, Sync);
    assert_impl_all!(Managed<[f32], StreamOwned<'static, Created>, Device>: Send, Sync);
    assert_not_impl_any!(Managed<[f32], StreamOwned<'static, PerThread>, Device>: Send, Sync);
    assert_not_impl_any!(Managed<[f32], HostOwned, Device>: std::ops::Deref, std::ops::DerefMut);
    assert_impl_all!(Managed<[f32], HostOwned, Mirror>: std::ops::Deref, std::ops::DerefMut);
    // So does memory born on a stream from a pool; a pool is shared by threads.
    assert_impl_all!(Managed<[f32], HostOwned, Pooled>: Send, Sync);
    assert_impl_all!(Managed<[f32], StreamOwned<'static, Created>, Pooled>: Send, Sync);
    assert_not_impl_any!(Managed<[f32], StreamOwned<'static, PerThread>, Pooled>: Send, Sync);
    assert_not_impl_any!(Managed<[f32], HostOwned, Pooled>: std::ops::Deref, std::ops::DerefMut);
    assert_impl_all!(MemPool: Send, Sync, Clone);
    // Storages are zero-sized markers, and unified memory carries nothing for them.
    const_assert_eq!(std::mem::size_of::<Unified>(), 0);
    const_assert_eq!(std::mem::size_of::<Mirror>(), 0);
    const_assert_eq!(std::mem::size_of::<Coherent>(), 0);
    const_assert_eq!(std::mem::size_of::<Device>(), 0);
    const_assert_eq!(std::mem::size_of::<Pooled>(), 0);

    // A foreign stream is shared by threads like an owned one, and so is its memory.
    assert_impl_all!(Stream<'static, Foreign>: Send, Sync);
    assert_impl_all!(Managed<[f32], StreamOwned<'static, Foreign>>: Send, Sync);
    // A device address is a borrow of its buffer: it moves where the buffer may.
    assert_impl_all!(DevicePtr<'static, f32>: Send, Sync);

    // A poisoner may be kept anywhere, by any thread: it only ever makes um leak or refuse.
    assert_impl_all!(Poisoner: Send, Sync, Clone);

    // A time mark names a point of a stream's work, not the stream: read on any thread.
    assert_impl_all!(TimeMark: Send, Sync, Clone);
    assert_impl_all!(TimeSpan: Send, Sync);

    // The legacy default stream is one stream for the whole context.
    assert_impl_all!(Stream<'static, Legacy>: Send, Sync);
}
