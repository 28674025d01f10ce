//! The supertrait that seals `um`'s traits: it is public (so it may appear in their bounds) but
//! lives in a private module, so no other crate can name it, and so none can implement
//! `State`, `StreamKind`, `Attachable`, `KernelArg`, `KernelArgs`, `SyncGroup` or `Storage`.

/// Implemented only inside `um-core`.
#[allow(unreachable_pub)]
pub trait Sealed {}

/// The token every hidden trait method of `um` takes: methods that change a buffer's state,
/// its association or its memory (`SyncGroup`'s, `KernelArg`'s and `KernelArgs`'s, and those of
/// `HasParts`, the storages' contract behind `Storage`), which must be `pub` because they sit
/// in public traits, but must never be called from outside `um`.
///
/// `#[doc(hidden)]` hides a method from the documentation, not from callers. This type is
/// public (so that it can appear in those signatures) but lives in a private module and has a
/// private field: no other crate can name it, construct it, or receive one, so no other crate
/// can call a method that takes it ([`docs/rules.md`](https://github.com/um-rs/um/blob/main/docs/rules.md), "Public but hidden").
#[allow(unreachable_pub)]
#[derive(Debug)]
pub struct Private(());

/// The one way to make a [`Private`]: inside `um-core`.
pub(crate) const PRIVATE: Private = Private(());
