//! The wait layer: waiting for a stream without blocking a thread.
//!
//! * [`futures`]: `sync_async` and `sync_all_async`, the transitions to the host as futures;
//! * [`scopes`]: `with_stream_async` and its siblings, stream scopes for async closures.
//!
//! Both stand on the reclaim layer (`crate::reclaim`): a completion on the stream wakes the
//! task, and memory given up on the way (a cancelled future, a cancelled scope) goes to the
//! reaper.

pub(crate) mod futures;
pub(crate) mod scopes;
