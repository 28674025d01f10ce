//! The two states of a [`Managed`](crate::Managed) allocation, [`HostOwned`] and
//! [`StreamOwned`], the sealed [`State`] trait, and [`HostAccess`], the sealed trait of the one
//! state the CPU may touch: zero-sized markers that no code can construct. Only the transitions
//! of `crate::state` (which re-exports them) retype memory from one to the other; they sit here,
//! below both `Managed` and its transitions, because `Managed` names them in its own
//! definition.

use std::marker::PhantomData;

use crate::driver::stream::{Brand, Created, StreamKind};
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
/// `K` defaults to [`Created`], so `StreamOwned<'s>` is memory attached to a stream `um` created.
/// With `K = PerThread` the state is neither `Send` nor `Sync`, because the per-thread default
/// stream handle names another stream on every thread.
pub struct StreamOwned<'s, K: StreamKind = Created> {
    _brand: Brand<'s>,
    _kind: PhantomData<K>,
}

/// The states in which the CPU may read and write a [`Managed`](crate::Managed) buffer:
/// [`HostOwned`] only. Sealed, and implemented for no other type, so that `Managed`'s `Deref`,
/// `DerefMut`, `Index`, `IndexMut`, `iter` and `iter_mut`, which are written generically over
/// the state with the bound `S: HostAccess`, exist in the host state only.
///
/// The bound is there for the compiler's message: indexing or iterating a stream-owned buffer
/// reports this trait's text ("sync it first") instead of "cannot index into a value". Where
/// the compiler does not report the bound (`*buf`, `&*buf`, a deref coercion, a slice method
/// other than `iter` and `iter_mut`), the error stays the plain one (E0614, E0308, E0599), and
/// the buffer is just as inaccessible.
#[diagnostic::on_unimplemented(
    message = "the CPU may touch a `Managed` buffer only when it is host-owned, and this one's state is `{Self}`: `sync` it first (`let buf = buf.sync()?;`)",
    label = "not known to be host-owned: no CPU access",
    note = "kernels of its stream may still be using it; `sync` waits for them and gives the buffer back to the host (several buffers of one stream: `let (a, b) = stream.sync_all((a, b))?;`)",
    note = "the buffers of a capture come back from the graph: `let (a, b) = graph.sync()?;`"
)]
pub trait HostAccess: State {}

impl Sealed for HostOwned {}
impl<K: StreamKind> Sealed for StreamOwned<'_, K> {}
impl State for HostOwned {
    const ON_STREAM: bool = false;
}
impl HostAccess for HostOwned {}
impl<K: StreamKind> State for StreamOwned<'_, K> {
    const ON_STREAM: bool = true;
    const IN_CAPTURE: bool = K::CAPTURING;
}
