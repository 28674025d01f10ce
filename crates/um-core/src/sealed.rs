//! The supertrait that seals `um`'s traits: it is public (so it may appear in their bounds) but
//! lives in a private module, so no other crate can name it, and so none can implement
//! `State`, `StreamKind`, `Attachable`, `KernelArg`, `KernelArgs` or `SyncGroup`.

/// Implemented only inside `um-core`.
#[allow(unreachable_pub)]
pub trait Sealed {}
