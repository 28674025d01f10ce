//! The memory layer: `Managed<T, S, M>`, its states and transitions, its storages, and the
//! copies and fills between buffers of one stream, and the pinned word a library reads results
//! from.

pub(crate) mod copy;
pub(crate) mod managed;
pub(crate) mod marker;
pub(crate) mod pinned_word;
pub(crate) mod raw;
pub(crate) mod release;
pub mod state;
pub mod storage;
