//! The stream kinds a cuSPARSE handle may belong to.

use um_core::{Attachable, Created, Foreign, PerThread};

/// A stream a cuSPARSE handle may belong to: a stream memory can be attached to (one um
/// created, a per-thread or a foreign stream), since the matrix, the vectors and the workspace
/// are attached to it. Not a graph's capture stream, and not the legacy stream (which takes no
/// single attach).
///
/// A captured product would use the handle's workspace at every replay of the graph, and the
/// graph does not hold the handle. Sealed.
#[diagnostic::on_unimplemented(
    message = "a cuSPARSE handle cannot belong to a `{Self}` stream",
    label = "not a stream cuSPARSE may compute on",
    note = "a graph's capture stream (`Capture`): um-cusparse does not record products into graphs (a recorded product would use the handle's workspace at every replay, and the graph does not hold the handle)",
    note = "the legacy stream (`Legacy`): the matrix, the vectors and the workspace are attached to the handle's stream, and memory cannot be attached singly to the NULL stream",
    note = "compute on a stream of `Context::with_stream`, the per-thread or a foreign stream, then capture only um's own kernels"
)]
pub trait SparseStream: Attachable + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

impl sealed::Sealed for Created {}
impl sealed::Sealed for PerThread {}
impl sealed::Sealed for Foreign {}
impl SparseStream for Created {}
impl SparseStream for PerThread {}
impl SparseStream for Foreign {}
