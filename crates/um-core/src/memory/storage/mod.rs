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
//! * [`Device`]: device memory alone (`cuMemAlloc`), with no host side. Host-owned means that no
//!   kernel may touch it, not that the CPU may read it: it has no `Deref`, `Index`, `iter` or
//!   `Debug` of its contents in any state (those need [`HostVisible`], which the other three
//!   implement). Its contents cross only through copies that wait (`from_slice_device`,
//!   `copy_from_host`, `copy_to_host`, `to_vec`), and its transitions make no driver call of
//!   their own.
//! * [`Pooled`]: device memory born on a stream from a [`MemPool`](crate::MemPool)
//!   (`Stream::alloc_zeroed`: `cuMemAllocFromPoolAsync` and a zero fill enqueued there, the
//!   buffer that stream's from the start), freed in stream order (`cuMemFreeAsync`). As
//!   [`Device`] memory otherwise: no host side, copies that wait, no driver call at the
//!   transitions.
//!
//! The states and transitions are the same for all five ([`crate::state`]); what differs is
//! each storage's own part of them:
//!
//! | | [`Unified`] | [`Coherent`] | [`Mirror`] | [`Device`] | [`Pooled`] |
//! | --- | --- | --- | --- | --- | --- |
//! | allocation | `cuMemAllocManaged`, attached to the host | `cuMemAllocManaged`, attached globally; every device needs concurrent managed access | `cuMemAllocHost` + `cuMemAlloc` | `cuMemAlloc`; the contents copied in, and waited for | on a stream: `cuMemAllocFromPoolAsync` + `cuMemsetD8Async`, no wait; stream-owned from the start |
//! | the CPU, host-owned | `Deref`, `DerefMut` | `Deref`, `DerefMut` | `Deref`, `DerefMut` (marks the host half written) | copies that wait: `copy_from_host`, `copy_to_host`, `to_vec` | as `Device` |
//! | a kernel gets | the managed address | the managed address | the device half | the device address | the device address |
//! | `attach` | `cuStreamAttachMemAsync` unless already associated; the [`Transfer`](crate::Transfer) policy | the policy | copy to the device if the host wrote | nothing | nothing |
//! | `sync`, before the wait | the policy (or, without concurrent managed access, attach to the host) | the policy | copy to the host if a launch took `&mut` | nothing | nothing |
//! | `hand_off`, after the event | `cuStreamAttachMemAsync` on B; B's policy | B's policy | nothing (same context only) | nothing (same context only) | nothing (same context only) |
//! | a `&mut` launch | | | marks the device half written | | |
//! | drop, stream-owned | wait, then `cuMemFree` | wait, then `cuMemFree` | wait, then `cuMemFree` + `cuMemFreeHost` | wait, then `cuMemFree` | `cuMemFreeAsync` on the owner, no wait (the reaper where a poisoner exists) |
//! | drop host-owned, orphan | `cuMemFree` | `cuMemFree` | `cuMemFree` + `cuMemFreeHost` | `cuMemFree` | `cuMemFreeAsync` on the freeing thread's default stream |
//!
//! One file per storage (`unified.rs`, `coherent.rs`, `mirror.rs`, `device.rs`, `pooled.rs`)
//! implements its part, and holds its constructors where they have names of their own
//! (`*_coherent`, `*_mirrored`, `*_device`, `Stream::alloc_zeroed`; the default storage's are
//! `Managed`'s own, `Managed::new`, `from_slice`, ...). `transfer.rs` holds the policies the two storages of managed memory
//! share, and `parts.rs` the contract they all implement (`HasParts`), the seal of host access
//! ([`HostVisible`]) and the allocation checks. A new storage is a new file implementing that
//! contract, and a line below: nothing in the state machine changes.

pub(crate) mod parts;
pub(crate) mod unified;

mod coherent;
mod device;
mod mirror;
mod pooled;
mod transfer;

pub use coherent::{Coherent, CoherentManaged};
pub use device::{Device, DeviceManaged};
#[cfg(feature = "test-hooks")]
pub use mirror::MirrorCopies;
pub use mirror::{Mirror, MirroredManaged};
pub use parts::{HostVisible, Storage};
pub use pooled::{Pooled, PooledManaged};
pub use unified::Unified;
