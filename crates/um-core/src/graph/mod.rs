//! The graph layer: CUDA graphs, captured once and replayed many times, that hold the buffers
//! they use.
//!
//! A capture scope ([`Stream::capture`](crate::Stream::capture), [`capture.rs`](capture)) moves
//! a set of buffers owned by a stream `'s` onto a stream of its own (kind
//! [`Capture`](crate::Capture), brand `'c`), begins a capture on it
//! (`cuStreamBeginCapture`, thread-local mode), runs the closure, whose launches on its
//! buffers are recorded, ends the capture and instantiates the graph. The [`Graph`]
//! ([`exec.rs`](exec)) then holds the buffers, owned by `'s` again: no CPU code can touch them,
//! no other stream can use them, no one can free them, for as long as it exists. A replay
//! ([`Graph::launch`]) is one `cuGraphLaunch` on `'s`; the buffers come back to the CPU only
//! through a wait on that stream ([`Graph::sync`], or [`Graph::host`] between replays).
//! Scalars of a captured kernel change between replays through the node its typed launcher
//! returns ([`Node`], [`node.rs`](node), `cuGraphExecKernelNodeSetParams`).
//!
//! The layer above `launch/` (captured launches are launches) and `memory/` (the transitions
//! into and out of a capture are `memory/state.rs`'s, through [`CaptureSet`](crate::CaptureSet)).

pub(crate) mod capture;
pub(crate) mod exec;
pub(crate) mod node;
