//! The stream's [`Transfer`] policy, for the two storages of managed memory ([`Unified`] and
//! [`Coherent`]): what each transition adds for it.
//!
//! | policy | at `attach` | at `sync`, before the wait | at `hand_off`, on the receiver |
//! | --- | --- | --- | --- |
//! | `OnDemand` | nothing | nothing | nothing |
//! | `Prefetch` | prefetch to the device | prefetch to the host | prefetch to its device |
//! | `HostResident` | advice, once per allocation | nothing | advice, on the allocation's device only |
//!
//! Attaching to a stream of another policy removes `HostResident`'s advice. The policies act
//! only where the device has concurrent managed access (`cuMemPrefetchAsync` requires it), and
//! elsewhere behave as `OnDemand`. Device memory ([`Mirror`]) has no pages to place: it always
//! copies what changed, whatever the policy.
//!
//! [`Unified`]: crate::Unified
//! [`Coherent`]: crate::Coherent
//! [`Mirror`]: crate::Mirror

use crate::driver;
use crate::driver::context::Context;
use crate::driver::stream::{RawStream, Transfer};
use crate::driver::sys;
use crate::error::Result;

/// The part of a managed-memory storage: what the policies have done to the allocation.
#[allow(unreachable_pub)]
#[derive(Debug, Default)]
pub struct Advice {
    /// The allocation carries the advice of [`Transfer::HostResident`].
    host_resident: bool,
}

/// At `attach`: what `to`'s policy does to the allocation `ptr..ptr + bytes` of `ctx`.
///
/// # Safety
/// `ptr..ptr + bytes` is a live managed allocation of `ctx` that the caller owns, with its
/// `advice`; `to` is a live stream of `ctx`, on which the attach (if any) is already enqueued.
pub(crate) unsafe fn on_attach(
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: &Context,
    advice: &mut Advice,
    to: RawStream,
) -> Result<()> {
    if !ctx.info().concurrent_managed_access {
        return Ok(());
    }
    let want_resident = to.transfer == Transfer::HostResident;
    if want_resident != advice.host_resident {
        ctx.bind()?;
        // SAFETY: the caller's guarantees.
        unsafe { set_host_resident(ptr, bytes, ctx.device(), advice, want_resident) }?;
    }
    if to.transfer == Transfer::Prefetch {
        ctx.bind()?;
        // SAFETY: live allocation of `bytes`, the stream is alive; a prefetch after the attach in
        // stream order moves pages only.
        unsafe {
            driver::mem_prefetch(
                ptr,
                bytes,
                sys::MemLocation::device(ctx.device()),
                to.handle,
            )
        }?;
    }
    Ok(())
}

/// At `sync`, before the wait: what the owning stream's policy does (its context is current).
///
/// # Safety
/// `ptr..ptr + bytes` is a live managed allocation of `ctx` that the caller owns, stream-owned
/// by `owner`, a live stream whose context is current.
pub(crate) unsafe fn on_release(
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: &Context,
    owner: RawStream,
) -> Result<()> {
    if ctx.info().concurrent_managed_access && owner.transfer == Transfer::Prefetch {
        // SAFETY: the caller's guarantees; a prefetch moves pages, never contents.
        unsafe { driver::mem_prefetch(ptr, bytes, sys::MemLocation::HOST, owner.handle) }?;
    }
    Ok(())
}

/// At `hand_off`, once the receiving stream `to` (of `to_ctx`, current) owns the allocation of
/// `ctx`: what its policy does. `HostResident` advice names the allocation's device; on a
/// stream of another device it is removed instead, and the policy acts as `OnDemand`.
///
/// # Safety
/// `ptr..ptr + bytes` is a live managed allocation of `ctx` that the caller owns, with its
/// `advice`; `to` is a live stream of `to_ctx`, which is current, and waits for the previous
/// owner's work (and the association, if any) enqueued before it.
pub(crate) unsafe fn on_hand_off(
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: &Context,
    advice: &mut Advice,
    to_ctx: &Context,
    to: RawStream,
) -> Result<()> {
    if !to_ctx.info().concurrent_managed_access {
        return Ok(());
    }
    let want_resident = to.transfer == Transfer::HostResident && to_ctx.same_as(ctx);
    if want_resident != advice.host_resident {
        // Advice changes placement, never contents, so it may be given while A's kernels run.
        // SAFETY: the caller's guarantees.
        unsafe { set_host_resident(ptr, bytes, ctx.device(), advice, want_resident) }?;
    }
    if to.transfer == Transfer::Prefetch {
        // SAFETY: live allocation of `bytes`; the stream is alive; enqueued on B after the wait
        // for A and the attach, so it moves pages once A is done with them.
        unsafe {
            driver::mem_prefetch(
                ptr,
                bytes,
                sys::MemLocation::device(to_ctx.device()),
                to.handle,
            )
        }?;
    }
    Ok(())
}

/// Sets (or removes) the advice of [`Transfer::HostResident`] on the whole allocation: preferred
/// location the host, accessed by the allocation's own `device`. Both transitions that apply a
/// policy (`attach` and `hand_off`) call it when the stream's policy and the allocation's
/// advice differ.
///
/// # Safety
/// `ptr..ptr + bytes` is a live managed allocation that the caller owns, with its `advice`.
unsafe fn set_host_resident(
    ptr: sys::CUdeviceptr,
    bytes: usize,
    device: sys::CUdevice,
    advice: &mut Advice,
    resident: bool,
) -> Result<()> {
    let (preferred, accessed) = if resident {
        (
            sys::ADVISE_SET_PREFERRED_LOCATION,
            sys::ADVISE_SET_ACCESSED_BY,
        )
    } else {
        (
            sys::ADVISE_UNSET_PREFERRED_LOCATION,
            sys::ADVISE_UNSET_ACCESSED_BY,
        )
    };
    // SAFETY: a live managed allocation of `bytes` that we own (the caller); advice changes
    // where pages are placed, never their contents.
    unsafe {
        driver::mem_advise(ptr, bytes, preferred, sys::MemLocation::HOST)?;
        driver::mem_advise(ptr, bytes, accessed, sys::MemLocation::device(device))?;
    }
    advice.host_resident = resident;
    Ok(())
}
