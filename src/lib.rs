//! # um: CUDA unified memory whose ownership the compiler checks
//!
//! The package is `um-cuda` on crates.io; its library is `um`. Depend on it as
//! `um-cuda = "0.1"` and write `use um::...`.
//!
//! CUDA states the rules of managed (unified) memory in prose: the CPU may touch memory
//! attached to a stream once every operation in that stream has completed; kernels on other
//! streams must not touch it; attaching singly to the NULL stream is illegal; and "no error
//! checking is performed". In `um` those sentences are types:
//!
//! * [`Managed<T, HostOwned>`](Managed): the CPU owns the memory and dereferences it; no
//!   kernel can see it.
//! * [`Managed<T, StreamOwned<'s>>`](Managed): the stream branded `'s` owns it; only launches
//!   on that stream accept it, and the CPU cannot read or write it.
//! * [`attach`](Managed::attach) (`cuStreamAttachMemAsync`) and [`sync`](Managed::sync)
//!   (`cuStreamSynchronize`) are the only transitions between the two, and
//!   [`hand_off`](Managed::hand_off) moves stream-owned memory to another stream without a
//!   host wait; all three consume the value. The state machine is in [`state`].
//!
//! A program that breaks a rule does not compile; what only the running program can know comes
//! back as an [`Err`](Error). The same states serve two more storages ([`storage`]): mirrored
//! memory (pinned host memory and device memory, copied only when needed) and coherent memory
//! (managed memory attached globally, for devices with concurrent managed access).
//!
//! ## Quick start
//!
//! Your kernels are CUDA C files; [`um-build`](https://docs.rs/um-build) compiles them in your
//! build script and generates a typed launcher per kernel, which [`include_kernels!`] brings
//! into your crate. In a new crate (`cargo new saxpy`):
//!
//! ```toml
//! # Cargo.toml
//! [dependencies]
//! um-cuda = "0.1" # the library is `um`: `use um::...`
//!
//! [build-dependencies]
//! um-build = "0.1"
//! ```
//!
//! ```rust,ignore
//! // build.rs: compiles kernels/*.cu to PTX and generates a launcher per kernel.
//! fn main() {
//!     um_build::Kernels::new("kernels").build_or_exit();
//! }
//! ```
//!
//! ```cuda
//! // kernels/saxpy.cu
//! #include "um.cuh"
//!
//! // y[i] = a * x[i] + y[i]
//! UM_SAFE_KERNEL void saxpy(const float *x, float *y, float a, um::len32 n) {
//!     for (auto i : um::indices(n)) {
//!         y[i] = a * x[i] + y[i];
//!     }
//! }
//! ```
//!
//! ```no_run
//! // src/main.rs
//! use um::{Context, Managed, StreamOptions};
//!
//! // A module per kernels/*.cu file: saxpy::saxpy(stream, &x, &mut y, a).
//! # /* This doctest has no build script: it uses the test kernels' testing.cu, whose `axpy` is
//! #    declared exactly as saxpy.cu declares `saxpy`, so the launcher is the same.
//! um::include_kernels!();
//! # */ mod saxpy { pub use um_test_kernels::testing::axpy as saxpy; }
//!
//! fn main() -> um::Result<()> {
//!     let ctx = Context::new(0)?; // device 0
//!     let x = Managed::from_slice(&ctx, &[1.0f32, 2.0, 3.0])?; // host-owned: the CPU's
//!     let y = Managed::from_slice(&ctx, &[10.0f32, 20.0, 30.0])?;
//!     let (_x, y) = ctx.with_stream(StreamOptions::new(), |stream| {
//!         let (x, mut y) = (x.attach(stream)?, y.attach(stream)?); // stream-owned: no CPU access
//!         saxpy::saxpy(stream, &x, &mut y, 2.0)?; // y = 2x + y; n comes from the buffers
//!         stream.sync_all((x, y)) // waits for the stream: host-owned again
//!     })?;
//!     println!("{:?}", &y[..]); // [12.0, 24.0, 36.0]
//!     Ok(())
//! }
//! ```
//!
//! Building needs nvcc, for your kernels, and the NVIDIA driver library `libcuda.so`, for
//! linking (no GPU); running needs a GPU. With the CUDA toolkit in `/usr/local/cuda` nothing
//! needs setting. Elsewhere, name both in your crate's `.cargo/config.toml`, which cargo reads
//! for every build, build scripts included:
//!
//! ```toml
//! # .cargo/config.toml
//! [env]
//! CUDA_LIBRARY_PATH = "/opt/cuda-13.0" # a folder whose lib64/ (or lib64/stubs/) holds libcuda.so
//! NVCC = "/opt/cuda-13.0/bin/nvcc"
//! ```
//!
//! `CUDA_PATH` alone is not enough: um-build finds nvcc through it, but the link step (the
//! build script of `cust_raw`) does not read it. A crate that has no kernels of its own needs
//! neither um-build nor nvcc: [`kernels`] ships its PTX.
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
//! * Errors: [`Error`], [`Result`].
//!
//! * Libraries on owned buffers: [`cublas`] (GEMM and GEMV) and [`nccl`] (collectives across
//!   GPUs and processes), each loaded at run time, so that building needs neither.
//!
//! This library re-exports the crates `um-core` (its API at the top level, listed in this
//! file), `um-kernels` (as [`kernels`]), `um-cublas` (as [`cublas`]) and `um-nccl` (as
//! [`nccl`]). [`prelude`] holds what most programs name: `use um::prelude::*;`.

pub use um_core::{
    Attachable, ByValue, Capture, CaptureSet, Coherent, CoherentManaged, Context, ContextOptions,
    Created, DeviceCopy, DeviceInfo, DevicePtr, DevicePtrMut, Eager, Error, Foreign, Graph,
    HostAccess, HostOwned, Kernel, KernelArg, KernelArgs, LaunchConfig, Legacy, Linear, Managed,
    Mirror, MirroredManaged, Module, Node, PerThread, Poisoner, Result, Scalars, State, Storage,
    Stream, StreamKind, StreamOptions, StreamOrder, StreamOwned, SyncAllFuture, SyncFuture,
    SyncGroup, Transfer, Unified, Zeroable, capturing_on_this_thread, defer_while_capturing,
    device_count, include_kernels, ptx_isa_version, reap_pending, refuse_inside_capture,
    refuse_inside_stream_callback, relaxed_while_capturing, state, storage,
};

pub mod prelude {
    //! What most programs name, for `use um::prelude::*;`: a device and its streams, managed
    //! memory in its two states and three storages, launch geometry, graphs, errors.
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
        Coherent, Context, Error, Graph, HostOwned, Linear, Managed, Mirror, Result, Stream,
        StreamOptions, StreamOwned, Transfer, Unified,
    };
}
#[doc(inline)]
pub use um_cublas as cublas;
#[doc(inline)]
pub use um_kernels as kernels;
#[doc(inline)]
pub use um_nccl as nccl;
