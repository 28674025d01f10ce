//! The memory layer: `Managed<T, S, M>`, its states and transitions, and its storages.

pub(crate) mod managed;
pub(crate) mod marker;
pub(crate) mod raw;
pub(crate) mod release;
pub mod state;
pub mod storage;
