//! Where a [`Managed`] keeps its bytes: the storage parameter `M` of `Managed<T, S, M>`.
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
//! The states and transitions are the same for both (`crate::state`); what differs is behind
//! the two functions of `HasParts` and the functions of this file: allocation, the pointer a
//! kernel gets, what `attach` and `sync` enqueue, and what drop frees.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::driver;
use crate::driver::context::Context;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::{Managed, check_aligned, check_capacity};
use crate::memory::state::HostOwned;
use crate::sealed::Sealed;

mod coherent;

/// The storages of a [`Managed`] allocation: [`Unified`], [`Coherent`] and [`Mirror`]. Sealed.
pub trait Storage: Sealed + parts::HasParts + 'static {
    /// What the storage is called in messages.
    #[doc(hidden)]
    const NAME: &'static str;
}

/// Storage: CUDA managed (unified) memory, one address for host and device, pages migrated by
/// the driver (and by the stream's [`Transfer`](crate::Transfer) policy). The default.
#[derive(Debug)]
pub struct Unified {
    _private: (),
}

/// Storage: CUDA managed memory attached globally (`CU_MEM_ATTACH_GLOBAL`), for devices with
/// concurrent managed access (every Pascal-or-later GPU on Linux); its constructors refuse
/// other devices with [`Error::NeedsConcurrentManagedAccess`], and refuse every device while
/// any device of the process lacks it (globally attached memory is reachable from all of them).
///
/// The states and the rules are those of [`Unified`]: a stream-owned buffer is reachable only
/// by launches on its stream, the CPU only in the host state. What differs is that `um` never
/// changes the driver's stream association. `cuStreamAttachMemAsync` is stream-ordered, and
/// each one held both streams of a two-stage pipeline for 34 to 57 µs on an H200 (the C++
/// probe `bench/pipeline_probe.cu`, docs/performance.md), and the first one in a process made
/// every later launch of the process cost more host time. Without it:
/// * `attach` makes no driver call besides the stream's [`Transfer`](crate::Transfer) policy;
/// * `sync` waits for the owning stream (the CPU may touch globally attached memory while
///   other streams run kernels, because the device has concurrent managed access);
/// * `hand_off` is an event recorded on A and waited for on B, on one device or across devices.
///
/// The association's promise to the driver ("only kernels of this stream touch it") is the
/// promise the brands already keep, so dropping the association loses no check. It loses the
/// driver's freedom to let the CPU use the memory while the owning stream is busy on devices
/// *without* concurrent access, which is why those devices are refused.
///
/// Allocate with [`Managed::from_slice_coherent`] and its siblings.
#[derive(Debug)]
pub struct Coherent {
    _private: (),
}

/// A coherent allocation: `CoherentManaged<[f32]>` is `Managed<[f32], HostOwned, Coherent>`.
pub type CoherentManaged<T, S = HostOwned> = Managed<T, S, Coherent>;

/// Storage: page-locked host memory for the host state, device memory for the stream state,
/// with the copies between them made by `attach` and `sync`, and only when needed.
///
/// Explicit copies move bytes faster than managed memory migrates them, and the CPU works
/// faster on pinned memory than on freshly migrated pages (see `docs/performance.md`); the
/// price is twice the memory (a host and a device copy). Allocate with
/// [`Managed::from_slice_mirrored`] and its siblings; every transition, launch and `sync_all`
/// takes mirrored buffers as it takes unified ones, mixed freely.
#[derive(Debug)]
pub struct Mirror {
    _private: (),
}

/// A mirrored allocation: `Mirrored<[f32]>` is `Managed<[f32], HostOwned, Mirror>`.
pub type Mirrored<T, S = HostOwned> = Managed<T, S, Mirror>;

impl Sealed for Unified {}
impl Sealed for Coherent {}
impl Sealed for Mirror {}
impl Storage for Unified {
    const NAME: &'static str = "unified";
}
impl Storage for Coherent {
    const NAME: &'static str = "coherent";
}
impl Storage for Mirror {
    const NAME: &'static str = "mirror";
}

/// The per-storage part of a `Managed`, and the one question the rest of the crate asks of a
/// storage: is it mirrored, and where is its device half? The trait is public (a bound of
/// [`Storage`]) but unnameable outside the crate, like `Sealed`.
pub(crate) mod parts {
    use super::*;

    #[allow(unreachable_pub)]
    pub trait HasParts {
        /// What the storage keeps besides the host pointer: nothing for unified memory.
        type Parts: Send + Sync + 'static;
        /// Whether the transitions move the driver's stream association
        /// (`cuStreamAttachMemAsync`): only [`Unified`] memory has one to move.
        const ASSOCIATED: bool;
        /// The mirror's state, or `None` for unified memory.
        fn mirror(parts: &Self::Parts) -> Option<&MirrorParts>;
        /// As `mirror`, mutable.
        fn mirror_mut(parts: &mut Self::Parts) -> Option<&mut MirrorParts>;
    }

    /// The device half of a mirrored allocation, and what is known about the two halves.
    #[allow(unreachable_pub)]
    #[derive(Debug)]
    pub struct MirrorParts {
        /// The device allocation (`cuMemAlloc`), as large as the host one.
        pub(crate) device: sys::CUdeviceptr,
        /// The host half may differ from the device half: set by every `DerefMut` and at
        /// allocation, cleared when `attach` enqueues the copy to the device.
        pub(crate) host_dirty: bool,
        /// A launch took the buffer as `&mut` since `attach`: set by the `&mut` kernel argument
        /// (which holds only a shared reference to it, hence atomic), cleared when `sync`
        /// enqueues the copy to the host.
        pub(crate) device_dirty: AtomicBool,
    }

    impl HasParts for Unified {
        type Parts = ();
        const ASSOCIATED: bool = true;
        fn mirror(_: &()) -> Option<&MirrorParts> {
            None
        }
        fn mirror_mut(_: &mut ()) -> Option<&mut MirrorParts> {
            None
        }
    }

    impl HasParts for Coherent {
        type Parts = ();
        const ASSOCIATED: bool = false;
        fn mirror(_: &()) -> Option<&MirrorParts> {
            None
        }
        fn mirror_mut(_: &mut ()) -> Option<&mut MirrorParts> {
            None
        }
    }

    impl HasParts for Mirror {
        type Parts = MirrorParts;
        const ASSOCIATED: bool = false;
        fn mirror(parts: &MirrorParts) -> Option<&MirrorParts> {
            Some(parts)
        }
        fn mirror_mut(parts: &mut MirrorParts) -> Option<&mut MirrorParts> {
            Some(parts)
        }
    }
}

pub(crate) use parts::MirrorParts;

/// Allocates `bytes` (> 0) of pinned host memory and as much device memory, after checking that
/// the GPU has that much free. If the device half is refused, the host half is freed first:
/// a failure leaks nothing.
///
/// Both addresses are checked against `align` (`align_of` the element type): a misaligned one
/// frees both halves and is refused.
pub(crate) fn alloc_mirror(
    ctx: &Context,
    bytes: usize,
    align: usize,
) -> Result<(NonNull<u8>, MirrorParts)> {
    ctx.bind()?;
    let (free, _) = driver::mem_info()?;
    check_capacity(bytes, free, ctx.oversubscription_allowed())?;
    let host = driver::mem_alloc_pinned(bytes)?;
    let Some(host) = NonNull::new(host.cast::<u8>()) else {
        return Err(null_pointer("cuMemAllocHost"));
    };
    let device = driver::mem_alloc_device(bytes).and_then(|device| {
        match check_aligned(host.as_ptr() as usize, align)
            .and_then(|()| check_aligned(device as usize, align))
        {
            Ok(()) => Ok(device),
            Err(e) => {
                // SAFETY: allocated just now; nothing else has the address.
                let _ = unsafe { driver::mem_free(device) };
                Err(e)
            }
        }
    });
    let device = match device {
        Ok(d) => d,
        Err(e) => {
            // SAFETY: `host` came from `mem_alloc_pinned` just now and nothing uses it.
            let _ = unsafe { driver::mem_free_pinned(host.as_ptr().cast()) };
            return Err(e);
        }
    };
    let parts = MirrorParts {
        device,
        host_dirty: true,
        device_dirty: AtomicBool::new(false),
    };
    Ok((host, parts))
}

pub(crate) fn null_pointer(call: &'static str) -> Error {
    Error::Driver {
        call,
        code: 0,
        name: "CUDA_SUCCESS".to_owned(),
        description: "returned a null pointer".to_owned(),
    }
}

/// Frees both halves.
///
/// # Safety
/// `host` and `parts` came from one [`alloc_mirror`], are freed once, and no copy or kernel can
/// still use them.
pub(crate) unsafe fn free_mirror(host: NonNull<u8>, parts: &MirrorParts) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let _ = driver::mem_free(parts.device);
        let _ = driver::mem_free_pinned(host.as_ptr().cast());
    }
}

/// At `attach`: enqueues the copy of the host half to the device half on `stream`, unless the
/// host has not written since the last one. The caller retypes the buffer to the stream state
/// right after, so the CPU cannot touch the host half while the copy may read it.
///
/// # Safety
/// `host..host + bytes` and `parts` are the two halves of one live mirrored allocation the
/// caller owns, in the host state; `stream` is a live stream of the current context.
pub(crate) unsafe fn to_device(
    parts: &mut MirrorParts,
    host: NonNull<u8>,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    parts.device_dirty.store(false, Ordering::Relaxed);
    if !parts.host_dirty {
        count(&H2D_SKIPPED);
        return Ok(());
    }
    count(&H2D);
    // SAFETY: the caller's guarantees; the buffer becomes stream-owned (no CPU access) until a
    // `sync` has waited for this stream, and drop waits for it too.
    unsafe {
        driver::memcpy_htod_async(
            parts.device,
            host.as_ptr().cast::<c_void>().cast_const(),
            bytes,
            stream,
        )
    }?;
    parts.host_dirty = false;
    Ok(())
}

/// At `sync` (before the wait): enqueues the copy of the device half to the host half on
/// `stream`, unless no launch took the buffer as `&mut` since `attach`.
///
/// # Safety
/// `host..host + bytes` and `parts` are the two halves of one live mirrored allocation the
/// caller owns, in the state owned by `stream`, a live stream of the current context; the caller
/// waits for `stream` before the CPU touches the host half.
pub(crate) unsafe fn to_host(
    parts: &MirrorParts,
    host: NonNull<u8>,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    if !parts.device_dirty.load(Ordering::Relaxed) {
        count(&D2H_SKIPPED);
        return Ok(());
    }
    count(&D2H);
    // SAFETY: the caller's guarantees: nothing reads or writes the host half until the wait
    // that follows (stream-owned), and kernels writing the device half run before this copy
    // in stream order.
    unsafe {
        driver::memcpy_dtoh_async(host.as_ptr().cast::<c_void>(), parts.device, bytes, stream)
    }?;
    parts.device_dirty.store(false, Ordering::Relaxed);
    Ok(())
}

thread_local! {
    static H2D: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static H2D_SKIPPED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static D2H: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static D2H_SKIPPED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count(counter: &'static std::thread::LocalKey<std::cell::Cell<u64>>) {
    counter.with(|n| n.set(n.get() + 1));
}

/// The copies mirrored memory made and skipped on one thread (see
/// [`mirror_copies_on_this_thread`](crate::mirror_copies_on_this_thread)).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorCopies {
    /// Host-to-device copies enqueued by `attach`.
    pub to_device: u64,
    /// `attach`es that needed no copy: the host had not written since the last one.
    pub to_device_skipped: u64,
    /// Device-to-host copies enqueued by `sync` (and `sync_all`).
    pub to_host: u64,
    /// `sync`s that needed no copy: no launch took the buffer as `&mut` since `attach`.
    pub to_host_skipped: u64,
}

impl MirrorCopies {
    /// The counts now, on the calling thread.
    pub fn now() -> Self {
        MirrorCopies {
            to_device: H2D.with(std::cell::Cell::get),
            to_device_skipped: H2D_SKIPPED.with(std::cell::Cell::get),
            to_host: D2H.with(std::cell::Cell::get),
            to_host_skipped: D2H_SKIPPED.with(std::cell::Cell::get),
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: MirrorCopies) -> Self {
        MirrorCopies {
            to_device: self.to_device.saturating_sub(earlier.to_device),
            to_device_skipped: self
                .to_device_skipped
                .saturating_sub(earlier.to_device_skipped),
            to_host: self.to_host.saturating_sub(earlier.to_host),
            to_host_skipped: self.to_host_skipped.saturating_sub(earlier.to_host_skipped),
        }
    }
}
