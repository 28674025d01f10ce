//! The two states of a [`Managed`](crate::Managed) allocation, [`HostOwned`] and
//! [`StreamOwned`], and the sealed [`State`] trait: zero-sized markers that no code can
//! construct. Only the transitions of `crate::state` (which re-exports them) retype memory from
//! one to the other; they sit here, below both `Managed` and its transitions, because `Managed`
//! names them in its own definition.

use std::marker::PhantomData;

use crate::driver::stream::{Brand, Owned, StreamKind};
use crate::sealed::Sealed;

/// The states of a [`Managed`](crate::Managed) allocation: [`HostOwned`] and [`StreamOwned`].
/// Sealed: no other crate can add a state.
pub trait State: Sealed {
    /// Whether work on a stream may be using the memory.
    #[doc(hidden)]
    const ON_STREAM: bool;
    /// Whether the owning stream is capturing a graph (its kind is `Capture`).
    #[doc(hidden)]
    const IN_CAPTURE: bool = false;
}

/// State: the CPU owns the memory; no kernel can see it.
pub struct HostOwned {
    _private: (),
}

/// State: the stream with brand `'s`, of kind `K`, owns the memory. Only kernels launched on
/// that stream may touch it; the CPU may not.
///
/// `K` defaults to [`Owned`], so `StreamOwned<'s>` is memory attached to a stream `um` created.
/// With `K = PerThread` the state is neither `Send` nor `Sync`, because the per-thread default
/// stream handle names another stream on every thread.
pub struct StreamOwned<'s, K: StreamKind = Owned> {
    _brand: Brand<'s>,
    _kind: PhantomData<K>,
}

impl Sealed for HostOwned {}
impl<K: StreamKind> Sealed for StreamOwned<'_, K> {}
impl State for HostOwned {
    const ON_STREAM: bool = false;
}
impl<K: StreamKind> State for StreamOwned<'_, K> {
    const ON_STREAM: bool = true;
    const IN_CAPTURE: bool = K::CAPTURING;
}
