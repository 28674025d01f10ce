//! The stream kinds a generator may belong to.

use um_core::{Created, Eager, Foreign, Legacy, PerThread};

/// A stream a generator may belong to: every kind but a graph's capture stream.
///
/// A captured generation would use the generator's device state at every replay of the graph,
/// and the graph does not hold the generator: it could be dropped while the graph lives.
/// Sealed: implemented here for the eager kinds only.
#[diagnostic::on_unimplemented(
    message = "a cuRAND generator cannot belong to a `{Self}` stream",
    label = "not a stream cuRAND may generate on",
    note = "a graph's capture stream (`Capture`): um-curand does not record generations into graphs (a recorded call would use the generator's state at every replay, and the graph does not hold the generator)",
    note = "generate on an eager stream (`Context::with_stream`, the per-thread, legacy or a foreign stream), then capture only um's own kernels"
)]
pub trait RandStream: Eager + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

impl sealed::Sealed for Created {}
impl sealed::Sealed for PerThread {}
impl sealed::Sealed for Legacy {}
impl sealed::Sealed for Foreign {}
impl RandStream for Created {}
impl RandStream for PerThread {}
impl RandStream for Legacy {}
impl RandStream for Foreign {}
