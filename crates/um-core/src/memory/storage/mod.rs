//! Where a [`Managed`](crate::Managed) keeps its bytes: the storage parameter `M` of
//! `Managed<T, S, M>`.
//!
//! * [`Unified`] (the default): one managed allocation (`cuMemAllocManaged`), one address for
//!   host and device; the driver migrates pages.
//! * [`Coherent`]: one managed allocation attached globally (`CU_MEM_ATTACH_GLOBAL`), on devices
//!   with concurrent managed access only. The transitions make no association call: `attach`
//!   applies the stream's transfer policy, `sync` waits, `hand_off` orders the two streams with
//!   an event. What a stream association would promise the driver, the types already enforce.
//! * [`Mirror`]: two allocations, page-locked host memory (`cuMemAllocHost`) for the host state
//!   and device memory (`cuMemAlloc`) for the stream state. `um` copies between them at the
//!   transitions, and only when the side that takes over may hold stale bytes:
//!   - `attach` enqueues host-to-device (`cuMemcpyHtoDAsync`) on the stream only if the host
//!     may have written since the last copy: every `DerefMut` marks the host side written, and
//!     a fresh allocation starts written;
//!   - `sync` enqueues device-to-host (`cuMemcpyDtoHAsync`) before its wait only if a launch
//!     took the buffer as `&mut` since the attach.
//!
//! The states and transitions are the same for all three ([`crate::state`]); what differs is
//! each storage's own part of them:
//!
//! | | [`Unified`] | [`Coherent`] | [`Mirror`] |
//! | --- | --- | --- | --- |
//! | allocation | `cuMemAllocManaged`, attached to the host | `cuMemAllocManaged`, attached globally; every device needs concurrent managed access | `cuMemAllocHost` + `cuMemAlloc` |
//! | a kernel gets | the managed address | the managed address | the device half |
//! | `attach` | `cuStreamAttachMemAsync` unless already associated; the [`Transfer`](crate::Transfer) policy | the policy | copy to the device if the host wrote |
//! | `sync`, before the wait | the policy (or, without concurrent managed access, attach to the host) | the policy | copy to the host if a launch took `&mut` |
//! | `hand_off`, after the event | `cuStreamAttachMemAsync` on B; B's policy | B's policy | nothing (same context only) |
//! | a `&mut` launch | | | marks the device half written |
//! | drop, orphan | `cuMemFree` | `cuMemFree` | `cuMemFree` + `cuMemFreeHost` |
//!
//! One file per storage (`unified.rs`, `coherent.rs`, `mirror.rs`) implements its part, and
//! holds its constructors where they have names of their own (`*_coherent`, `*_mirrored`; the
//! default storage's are `Managed`'s own, `Managed::new`, `from_slice`, ...). `transfer.rs` holds
//! the policies the two storages of managed memory share, and `parts.rs` the contract they all
//! implement (`HasParts`) and the allocation checks. A new storage is a new file implementing
//! that contract, and a line below: nothing in the state machine changes.

pub(crate) mod parts;
pub(crate) mod unified;

mod coherent;
mod mirror;
mod transfer;

pub use coherent::{Coherent, CoherentManaged};
#[cfg(feature = "test-hooks")]
pub use mirror::MirrorCopies;
pub use mirror::{Mirror, MirroredManaged};
pub use parts::Storage;
pub use unified::Unified;
