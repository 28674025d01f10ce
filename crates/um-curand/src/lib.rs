//! # um-curand: cuRAND on `um`'s owned buffers
//!
//! Random numbers generated on the stream that owns the buffer: uniform and normal `f32` and
//! `f64`, and raw `u32`. A generator ([`Rng`]) belongs to one stream for its whole life, so its
//! device state is only ever touched by that stream's work, in order, and no call records or
//! waits for anything. [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md)
//! has the rules this crate builds on (the raw handles of `um-core`).
//!
//! * [`Rng`]: one `curandGenerator_t` of one stream; neither `Send` nor `Sync`.
//! * [`RngKind`]: Philox (the default), XORWOW, MRG32k3a.
//! * [`Element`]: `f32` and `f64`, sealed; any other element type does not compile.
//! * [`Curand`]: the library, loaded at run time (`dlopen`), so that building needs nothing:
//!   `UM_CURAND_LIB`, else `libcurand.so.10`, `libcurand.so`, then the toolkit's folder. A
//!   missing library is [`Error::NotFound`], naming what was tried and what to install.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use um_core::{Context, Managed, StreamOptions};
//! use um_curand::{Rng, RngKind};
//!
//! let ctx = Context::new(0)?;
//! let u = Managed::<[f64]>::zeroed_slice(&ctx, 1000)?;
//! let u = ctx.with_stream(StreamOptions::new(), |s| {
//!     let mut rng = Rng::new(s, RngKind::default(), 42)?;
//!     let mut u = u.attach(s)?;
//!     rng.uniform(s, &mut u)?;
//!     u.sync()
//! })?;
//! assert!(u.iter().all(|&v| v > 0.0 && v <= 1.0));
//! # Ok(()) }
//! ```
//!
//! A host-owned buffer is not an output:
//!
//! ```compile_fail,E0308
//! # fn f(ctx: &um_core::Context) -> um_core::Result<()> {
//! # use um_core::{Managed, StreamOptions};
//! let mut x = Managed::<[f32]>::zeroed_slice(ctx, 4)?;
//! ctx.with_stream(StreamOptions::new(), |s| {
//!     let mut rng = um_curand::Rng::new(s, um_curand::RngKind::Philox, 1)?;
//!     rng.uniform(s, &mut x)?; // `x` is the CPU's
//!     Ok(())
//! })
//! # }
//! ```

mod element;
mod error;
mod library;
mod result;
mod rng;
mod stream;
pub mod sys;

pub use element::Element;
pub use error::{Error, Result};
pub use library::{Curand, ENV_VAR, INSTALL_HELP, SEARCH};
pub use rng::{Rng, RngKind};
pub use stream::RandStream;

// The thread facts the design relies on, checked at compile time.
mod facts {
    use super::*;
    use static_assertions::{assert_impl_all, assert_not_impl_any};
    use um_core::Created;

    // A generator is of one thread and one stream.
    assert_not_impl_any!(Rng<'static, Created>: Send, Sync);
    // The library itself is immutable after loading.
    assert_impl_all!(Curand: Send, Sync);
}
