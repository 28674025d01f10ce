//! The stream kinds a cuBLAS call may be enqueued on.

use um_core::{Created, Eager, Foreign, Legacy, PerThread};

/// A stream a cuBLAS call may run on: every kind but a graph's capture stream.
///
/// A captured cuBLAS call would use the handle's workspace at every replay of the graph, and
/// the graph does not hold the handle: it could be dropped, or serve another stream, while the
/// graph lives. Sealed: implemented here for the eager kinds only.
#[diagnostic::on_unimplemented(
    message = "a cuBLAS call cannot run on a `{Self}` stream",
    label = "not a stream cuBLAS may enqueue on",
    note = "a graph's capture stream (`Capture`): um-cublas does not record calls into graphs (a recorded call would use the handle's workspace at every replay, and the graph does not hold the handle)",
    note = "call cuBLAS on an eager stream (`Context::with_stream`, the per-thread, legacy or a foreign stream) and capture only um's own kernels"
)]
pub trait BlasStream: Eager + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

impl sealed::Sealed for Created {}
impl sealed::Sealed for PerThread {}
impl sealed::Sealed for Legacy {}
impl sealed::Sealed for Foreign {}
impl BlasStream for Created {}
impl BlasStream for PerThread {}
impl BlasStream for Legacy {}
impl BlasStream for Foreign {}
