//! The memory layer: `Managed<T, S, M>`, its states and transitions, its storages, and the
//! copies and fills between buffers of one stream.

pub(crate) mod copy;
pub(crate) mod managed;
pub(crate) mod marker;
pub(crate) mod raw;
pub(crate) mod release;
pub mod state;
pub mod storage;
