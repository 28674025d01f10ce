//! # um-cusparse: cuSPARSE on `um`'s owned buffers
//!
//! Sparse products whose operands the compiler checks: SpMV (`y = alpha op(A) x + beta y`) and
//! SpMM (`C = alpha A B + beta C`) on a [`Csr`] matrix whose structure is proved while the CPU
//! owns it, and that moves to a stream as one unit. Every operand is owned by the stream the call
//! is enqueued on, which is the handle's own ([`Sparse`]), with its workspace.
//! [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md) has the rules.
//!
//! * [`Csr`]: rows, columns, row offsets, column indices and values; `Csr::new` proves the
//!   structure (`Error::Structure` otherwise), `attach` and `sync` move all of it.
//! * [`Sparse`]: one `cusparseHandle_t` of one stream, with its workspace; neither `Send` nor
//!   `Sync`.
//! * [`Element`]: `f32` and `f64`, sealed.
//! * [`Cusparse`]: the library, loaded at run time (`dlopen`): `UM_CUSPARSE_LIB`, else
//!   `libcusparse.so.12`, `libcusparse.so`, then the toolkit's folder. A missing library is
//!   [`Error::NotFound`], naming what was tried and what to install.
//!
//! A matrix whose structure is not proved cannot be made:
//!
//! ```compile_fail,E0451
//! # fn f(ctx: &um_core::Context) {
//! let a = um_cusparse::Csr::<f32> { rows: 1, cols: 1 }; // private fields
//! # }
//! ```

mod csr;
mod element;
mod error;
mod library;
mod result;
mod sparse;
mod stream;
pub mod sys;

pub use csr::Csr;
pub use element::Element;
pub use error::{Error, Result};
pub use library::{Cusparse, ENV_VAR, INSTALL_HELP, SEARCH};
pub use sparse::{Op, Sparse};
pub use stream::SparseStream;

// The thread facts the design relies on, checked at compile time.
mod facts {
    use super::*;
    use static_assertions::{assert_impl_all, assert_not_impl_any};
    use um_core::{Created, Mirror, PerThread, StreamOwned};

    // A handle is of one thread and one stream.
    assert_not_impl_any!(Sparse<'static, Created>: Send, Sync);
    // The library itself is immutable after loading.
    assert_impl_all!(Cusparse: Send, Sync);
    // A host-owned matrix may move between threads, as its buffers may.
    assert_impl_all!(Csr<f32>: Send, Sync);
    // A matrix attached to the per-thread default stream stays on its thread, as its buffers
    // do (that stream is another on every thread), in every storage.
    assert_not_impl_any!(Csr<f32, StreamOwned<'static, PerThread>>: Send, Sync);
    assert_not_impl_any!(Csr<f64, StreamOwned<'static, PerThread>, Mirror>: Send, Sync);
}
