//! # um-cublas: cuBLAS on `um`'s owned buffers
//!
//! GEMM, strided batched GEMM, GEMV and the level-1 routines (dot, nrm2, asum, iamax, axpy,
//! scal, copy, swap) whose operands the compiler checks: every matrix and vector is a
//! `Managed<[T], StreamOwned<'s, K>, M>` owned by the stream the call is enqueued on (`&` for
//! what cuBLAS reads, `&mut` for what it writes), so no cuBLAS call can touch memory the CPU or
//! another stream owns, and the buffers cannot be freed or handed back to the CPU while it may
//! run. Shapes, leading dimensions, increments, strides and transposes are checked against the
//! buffers' lengths before cuBLAS runs. A reduction's result is returned to the host (cuBLAS
//! writes it into a page-locked word, read after one wait for the stream; refused inside a
//! capture closure) or written into a one-element buffer
//! of the same stream (no wait). A routine this crate does not wrap is a few lines:
//! [`Cublas::symbol`] and [`Blas::raw_handle_on`]. [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md) has the rules this crate builds on (the raw handles of
//! `um-core`) and the ones it adds.
//!
//! * [`Blas`]: one cuBLAS handle of one [`Context`](um_core::Context); `Send`, not `Sync`
//!   (one thread at a time).
//! * [`Gemm`] and [`Gemv`]: what to compute, column-major (cuBLAS's convention) or row-major
//!   ([`Gemm::row_major`], computed as `C^T = B^T A^T` on the same buffers);
//!   [`StridedBatched`] ([`Gemm::strided_batched`]): many GEMMs of one shape at fixed strides.
//! * [`Level1`]: the length and increments of a level-1 call's vectors.
//! * [`Element`]: `f32` and `f64`, sealed; any other element type does not compile.
//! * [`Blas::gemm_ex`]: GEMM of half-precision inputs ([`F16`], [`Bf16`]: the sealed
//!   [`HalfElement`], with exact conversions from and to `f32`) into an `f32` output, summed in
//!   `f32` (`cublasGemmEx`); the output of a half type does not compile
//!   (`tests/ui/cublas/gemm_ex_output_of_half_type`).
//! * [`Cublas`]: the library, loaded at run time (`dlopen`), so that building needs nothing:
//!   `UM_CUBLAS_LIB`, else `libcublas.so.13`, `libcublas.so`, then the toolkit's folder. A
//!   missing library is [`Error::NotFound`], naming what was tried and what to install.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use um_core::{Context, Managed, StreamOptions};
//! use um_cublas::{Blas, Gemm, Gemv, Op};
//!
//! let ctx = Context::new(0)?;
//! let blas = Blas::new(&ctx)?;
//! // Row-major 2x3 times 3x2.
//! let a = Managed::from_slice(&ctx, &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = Managed::from_slice(&ctx, &[1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0])?;
//! let c = Managed::<[f64]>::zeroed_slice(&ctx, 4)?;
//! let c = ctx.with_stream(StreamOptions::new(), |s| {
//!     let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
//!     blas.gemm(s, &Gemm::row_major(2, 2, 3), &a, &b, &mut c)?;
//!     c.sync()
//! })?;
//! assert_eq!(&c[..], &[4.0, 5.0, 10.0, 11.0]);
//! # let _ = (Gemv::<f32>::new(1, 1).trans(Op::T),);
//! # Ok(()) }
//! ```
//!
//! A host-owned buffer is not an operand:
//!
//! ```compile_fail,E0308
//! # fn f(ctx: &um_core::Context, blas: &um_cublas::Blas) -> um_core::Result<()> {
//! # use um_core::{Managed, StreamOptions};
//! let a = Managed::from_slice(ctx, &[1.0f32])?;
//! let b = Managed::from_slice(ctx, &[1.0f32])?;
//! let c = Managed::from_slice(ctx, &[0.0f32])?;
//! ctx.with_stream(StreamOptions::new(), |s| {
//!     let (b, mut c) = (b.attach(s)?, c.attach(s)?);
//!     blas.gemm(s, &um_cublas::Gemm::new(1, 1, 1), &a, &b, &mut c)?; // `a` is the CPU's
//!     Ok(())
//! })
//! # }
//! ```

mod blas;
mod element;
mod error;
mod half;
mod library;
mod result;
mod shape;
mod stream;
pub mod sys;

pub use blas::Blas;
pub use element::{Element, Kind};
pub use error::{Error, Result, ShapeError};
pub use half::{Bf16, F16, HalfElement};
pub use library::{Cublas, ENV_VAR, INSTALL_HELP, SEARCH};
pub use shape::{Gemm, Gemv, Layout, Level1, Op, StridedBatched};
pub use stream::BlasStream;

// The thread facts the design relies on, checked at compile time.
mod facts {
    use super::*;
    use static_assertions::{assert_impl_all, assert_not_impl_any};

    // One thread at a time: a handle may move, but not be shared.
    assert_impl_all!(Blas: Send);
    assert_not_impl_any!(Blas: Sync);
    // The library itself is immutable after loading.
    assert_impl_all!(Cublas: Send, Sync);
    // Descriptions are plain values.
    assert_impl_all!(Gemm<f32>: Send, Sync, Copy);
    assert_impl_all!(Gemv<f64>: Send, Sync, Copy);
    assert_impl_all!(Level1: Send, Sync, Copy);
    assert_impl_all!(StridedBatched<f32>: Send, Sync, Copy);
}
