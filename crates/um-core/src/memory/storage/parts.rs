//! The contract between `Managed` and its storages: the public, sealed [`Storage`] trait, and
//! [`HasParts`], through which each storage does its own part of every transition.
//!
//! The state machine (`crate::state`) sequences a transition (the context and device checks, a
//! handoff's event, the retype) and calls the storage at fixed points; it never asks which
//! storage it moves. What `Managed` knows of its storage is what this file says: a part of its
//! own ([`HasParts::Parts`]), an allocation and a free, the address a kernel gets, and one method
//! per point of a transition. Every call is static (`M: Storage` is a type parameter): no
//! transition, launch or drop dispatches dynamically or allocates for its storage.
//!
//! The allocation checks live here too, so that every storage passes them: the size and
//! alignment of the element type ([`byte_size`], the only maker of a [`Size`]), the free memory
//! of the GPU, and the alignment of every address a storage returns ([`allocate`]).

use std::ffi::c_uint;
use std::mem;
use std::ptr::NonNull;

use crate::driver;
use crate::driver::context::{Context, refuse_inside_stream_callback};
use crate::driver::poison::PoisonMarks;
use crate::driver::stream::RawStream;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::reclaim::reaper::Orphan;
use crate::sealed::{PRIVATE, Private, Sealed};

/// The storages of a [`Managed`](crate::Managed) allocation: [`Unified`](crate::Unified),
/// [`Coherent`](crate::Coherent), [`Mirror`](crate::Mirror), [`Device`](crate::Device) and
/// [`Pooled`](crate::Pooled). Sealed.
pub trait Storage: Sealed + HasParts + 'static {
    /// What the storage is called in messages.
    #[doc(hidden)]
    const NAME: &'static str;
    /// Whether the memory is managed memory that the driver associates with one stream at a
    /// time (`CU_MEM_ATTACH_SINGLE`): on a device without concurrent managed access, work of
    /// any other stream (a library's internal stream, say) must not touch it. For libraries that
    /// decide which buffers they may take.
    #[doc(hidden)]
    const STREAM_ASSOCIATED: bool;
}

/// The storages whose host-owned buffers the CPU may read and write in place:
/// [`Unified`](crate::Unified), [`Coherent`](crate::Coherent) and [`Mirror`](crate::Mirror), whose
/// host address is memory the CPU can touch (managed, or pinned). Sealed (it needs [`Storage`]),
/// and implemented for no other type: [`Device`](crate::Device) and [`Pooled`](crate::Pooled)
/// memory has no host side, so `Deref`, `DerefMut`, `Index`, `IndexMut`, `iter`, `iter_mut`, a
/// `Debug` of the contents and a graph's host step ([`Graph::host`](crate::Graph::host)), all
/// bounded by it, do not exist for a device buffer in any state. Its contents cross only through
/// copies that say where they wait (`copy_to_host`, `to_vec`, `copy_from_host`).
#[diagnostic::on_unimplemented(
    message = "the CPU cannot read or write `{Self}` memory in place: it has no host side",
    label = "device memory: no CPU access in any state",
    note = "copy it: `buf.to_vec()?`, `buf.copy_to_host(&mut out)?`, `buf.copy_from_host(&data)?` (each waits for its copy)",
    note = "or allocate a storage the CPU can touch: `Managed::from_slice` (unified), `from_slice_mirrored`, `from_slice_coherent`"
)]
pub trait HostVisible: Storage {}

/// What a storage keeps besides the host address, and its part of every transition.
///
/// Public only because it bounds [`Storage`]; it lives in a module no other crate can name, and
/// every method that allocates, frees, enqueues, or changes a buffer's association or flags
/// takes the token [`Private`], which no other crate can make: none of them can be called from
/// outside `um`, through a `Storage` bound or otherwise.
///
/// `host` is always what [`Allocate::alloc`] returned as the allocation's host address,
/// and `a` the rest of it. For a storage of [`HostVisible`] it is memory the CPU may touch in
/// the host state. For one without a host side (`Device`, `Pooled`) it is a sentinel,
/// [`NO_HOST`], which nothing dereferences: the only code that reads or writes through a host
/// address (`Managed`'s `Deref` and `DerefMut`, the constructors' writes in `Fresh`, a
/// graph's host views, the host-state `Debug`) is bounded by `HostVisible`, and every method
/// below that such a storage implements ignores `host`; the address the device uses is in its
/// part ([`device_ptr`](HasParts::device_ptr)). The `unsafe` methods enqueue work on streams;
/// their callers (the transitions) guarantee what each `# Safety` says.
#[allow(unreachable_pub)]
pub trait HasParts: Sized {
    /// What the storage keeps per allocation besides the host address. Dropping it frees
    /// nothing: only [`free`](HasParts::free) does.
    type Parts: Send + Sync + 'static;

    /// Whether the storage may allocate in `ctx` at all: checked first, before the free memory.
    fn admit(ctx: &Context) -> Result<()>;

    /// Frees what the storage allocated (its [`Allocate::alloc`], or for memory born on a
    /// stream the allocation enqueued there), with no wait: it may be freed now.
    ///
    /// # Safety
    /// `host` and `parts` came from one `alloc` of this storage and are freed once; the
    /// allocation's context is current; no kernel or copy can still use them.
    unsafe fn free(host: NonNull<u8>, parts: &Self::Parts, _: Private);

    /// The address a kernel gets.
    fn device_ptr(host: NonNull<u8>, parts: &Self::Parts) -> sys::CUdeviceptr;

    /// Bytes of memory an allocation of `bytes` holds.
    fn footprint(bytes: usize) -> usize;

    /// The CPU may write the buffer (a `DerefMut` in the host state).
    fn host_written(parts: &mut Self::Parts, _: Private);

    /// A launch takes the buffer as `&mut`: its kernel may write it.
    fn device_written(parts: &Self::Parts, _: Private);

    /// Whether a launch may have written the buffer since the storage last looked (a mirror's
    /// mark of [`device_written`](HasParts::device_written)); `false` where the storage keeps no
    /// such mark. A graph reads it once its capture has ended, and marks the same buffers again
    /// at every replay.
    fn written_on_device(parts: &Self::Parts) -> bool;

    /// Whether buffers of this storage, allocated in `ctx`, may be recorded into a graph: the
    /// check a capture scope makes before it begins.
    fn check_capture(ctx: &Context) -> Result<()>;

    /// At `attach` (and `attach_global`), before the retype: enqueues on `to` what must come
    /// before `to`'s kernels may use the buffer. On `Err` the buffer, still host-owned, is
    /// dropped (freed) by the caller.
    ///
    /// # Safety
    /// `host` and `a` are one live allocation of this storage that the caller owns, in the host
    /// state; `to` is a live stream of `a.ctx`'s context; `flag` is `CU_MEM_ATTACH_SINGLE` only
    /// if `to` is not the NULL stream.
    unsafe fn attach(
        host: NonNull<u8>,
        a: &mut Allocation<Self>,
        to: RawStream,
        flag: c_uint,
        _: Private,
    ) -> Result<()>;

    /// At `sync` (and `sync_all`, and the making of a sync future), before the wait: enqueues on
    /// the owning stream (`a.stream`) what must come before the CPU may touch the buffer, and
    /// says which stream the buffer stays associated with once it is back on the host.
    ///
    /// # Safety
    /// `host` and `a` are one live allocation of this storage that the caller owns, stream-owned
    /// by `a.stream`, a live stream whose context is current; the caller waits for that stream
    /// before the CPU touches the buffer.
    unsafe fn release(host: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Result<RawStream>;

    /// At `hand_off`, before any driver call: refuses a handoff that the storage cannot make
    /// between the allocation's context `memory`, the owner's `from` and the receiver's `to`.
    fn check_hand_off(memory: &Context, from: &Context, to: &Context) -> Result<()>;

    /// At `hand_off`, once `to` waits (on the GPU) for the work queued on the owner so far, and
    /// before the retype: enqueues on `to` what must come before `to` owns the buffer. On `Err`
    /// the buffer is dropped as the old owner's.
    ///
    /// # Safety
    /// `host` and `a` are one live allocation of this storage that the caller owns,
    /// stream-owned by `a.stream`; `to` is a live stream, not the NULL stream, whose context is
    /// current, and which waits for `a.stream`'s work queued before this call.
    unsafe fn hand_over(
        host: NonNull<u8>,
        a: &Allocation<Self>,
        to: RawStream,
        _: Private,
    ) -> Result<()>;

    /// At `hand_off`, after the retype: what the new owner (`a.stream`, of context `to_ctx`)
    /// wants of the buffer. On `Err` the buffer is dropped as the new owner's.
    ///
    /// # Safety
    /// `host` and `a` are one live allocation of this storage that the caller owns,
    /// stream-owned by `a.stream`, a live stream of `to_ctx`, which is current.
    unsafe fn receive(
        host: NonNull<u8>,
        a: &mut Allocation<Self>,
        to_ctx: &Context,
        _: Private,
    ) -> Result<()>;

    /// The allocation given up, for a free that waits for its stream without blocking a thread
    /// (`crate::reclaim`): an orphan whose free is this storage's free of it.
    ///
    /// # Safety
    /// The caller gives the allocation up: it frees the allocation itself only if the orphan
    /// is dropped without reaching the reaper, and never after handing it there.
    unsafe fn orphan(host: NonNull<u8>, a: &Allocation<Self>, _: Private) -> Orphan;

    /// Whether the storage frees memory in the order of a stream (memory of a pool, freed with
    /// `cuMemFreeAsync`): then the drop of a stream-owned buffer enqueues its free on the
    /// owning stream ([`free_in_stream_order`](HasParts::free_in_stream_order)) instead of
    /// waiting for that stream. `false` for memory whose free is immediate (`cuMemFree`).
    const FREES_IN_STREAM_ORDER: bool = false;

    /// At the drop of a stream-owned buffer, where [`FREES_IN_STREAM_ORDER`]: enqueues the
    /// free on the owning stream `a.stream`, after all the work queued there (which includes,
    /// through the events of `hand_off`, the work of the streams it was handed off from), with
    /// no host wait. Whether it did: `false` if the driver refused it (nothing was enqueued, and
    /// the caller frees the allocation another way), and for every storage that frees at once.
    ///
    /// # Safety
    /// `host` and `a` are one live allocation of this storage that the caller owns, stream-owned
    /// by `a.stream`, a live stream whose context is current; no work queued on it so far can be
    /// aborted (every poison mark the buffer carries is unset, and no `Poisoner` of them
    /// exists); on `true` the caller never frees or uses the allocation again.
    ///
    /// [`FREES_IN_STREAM_ORDER`]: HasParts::FREES_IN_STREAM_ORDER
    unsafe fn free_in_stream_order(_: NonNull<u8>, _: &Allocation<Self>, _: Private) -> bool {
        false
    }
}

/// The storages whose memory is allocated at once, in a context (every storage but one born on
/// a stream, [`Pooled`](crate::Pooled), whose allocation is enqueued on its stream and has its
/// own path: `Stream::alloc_zeroed`). [`allocate`] and the constructors' common path take it.
/// Crate-private: no bound outside `um-core` names it.
pub(crate) trait Allocate: HasParts {
    /// Allocates `size` in `ctx`, which is current and has that many bytes free: the host
    /// address and the storage's part. A failure leaks nothing. [`allocate`] checks the
    /// addresses' alignment afterwards.
    fn alloc(ctx: &Context, size: Size, _: Private) -> Result<(NonNull<u8>, Self::Parts)>;
}

/// What a storage sees of one allocation: everything `Managed` keeps but the typed host address
/// and the state.
#[allow(unreachable_pub)]
pub struct Allocation<M: HasParts> {
    /// Size in bytes (of each half, for a storage of two).
    pub(crate) bytes: usize,
    /// The context the memory was allocated in.
    pub(crate) ctx: Context,
    /// The stream the allocation is associated with (`RawStream::NONE` when it is attached to
    /// the host). In a stream-owned state it is the owning stream.
    pub(crate) stream: RawStream,
    /// The storage's own part.
    pub(crate) parts: M::Parts,
    /// The poison marks of the streams the memory was handed off from (`hand_off`) since it
    /// was last host-owned: work aborted there may still touch it after the new owner's wait,
    /// so a mark set here counts as the owner's own. Empty for memory never handed off (and
    /// the first mark kept without an allocation); cleared when the memory becomes host-owned,
    /// which happens only after a wait that found every mark unset.
    pub(crate) handed_from: PoisonMarks,
}

/// The checked size of a new allocation, and the alignment its element type needs. Only
/// [`byte_size`] makes one, so every allocation has passed its checks.
///
/// A storage of memory born on a stream (`Pooled`) has no [`Allocate`]: its allocation is
/// enqueued on the stream (`Stream::alloc_zeroed`), through [`byte_size`] and the address check
/// too, but not the free-memory guard, which is for managed memory (oversubscribed, it can hang
/// a shared GPU), where a pool's refusal is the driver's out-of-memory error.
#[allow(unreachable_pub)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    bytes: usize,
    align: usize,
}

impl Size {
    /// The number of bytes (> 0).
    pub(crate) fn bytes(self) -> usize {
        self.bytes
    }

    /// The alignment the element type needs (at most [`MAX_ALIGN`]).
    pub(crate) fn align(self) -> usize {
        self.align
    }
}

/// Checked byte size of `len` elements of `T`, refusing zero, and refusing a `T` that needs a
/// larger alignment than every allocation has ([`MAX_ALIGN`]). Every constructor of every
/// storage calls it before it allocates: [`allocate`] takes only its result.
pub(crate) fn byte_size<T>(len: usize) -> Result<Size> {
    let align = mem::align_of::<T>();
    if align > MAX_ALIGN {
        return Err(Error::OverAligned {
            align,
            max: MAX_ALIGN,
        });
    }
    let elem_size = mem::size_of::<T>();
    let bytes = len
        .checked_mul(elem_size)
        .ok_or(Error::SizeOverflow { len, elem_size })?;
    if bytes == 0 {
        return Err(Error::ZeroSized { len, elem_size });
    }
    Ok(Size { bytes, align })
}

/// The host address of an allocation that has no host side ([`Device`](crate::Device)): 256,
/// aligned for every element type a constructor admits ([`MAX_ALIGN`]), so that it passes
/// [`allocate`]'s checks, and in the first page of the address space, which is never mapped: it
/// is never dereferenced (see [`HasParts`]), and were it ever, the access would fault instead
/// of reading memory of someone else.
pub(crate) const NO_HOST: NonNull<u8> = NonNull::<NoHostAlign>::dangling().cast::<u8>();

/// A type aligned to [`MAX_ALIGN`], whose dangling pointer is [`NO_HOST`].
#[repr(C, align(256))]
struct NoHostAlign;

/// The alignment every allocation of every storage has: the driver's guarantee for
/// `cuMemAlloc` and `cuMemAllocManaged` ("aligned to at least 256 bytes"), and checked on
/// every address anyway (see [`check_aligned`]).
pub(crate) const MAX_ALIGN: usize = 256;

/// `Ok` if `address` is aligned to `align` (a power of two); otherwise
/// [`Error::OverAligned`] with the alignment the address has. Every allocation's addresses
/// (host and device) pass through it with `align_of::<T>()`, so that a driver that ever broke
/// its guarantee would give an `Err`, never a misaligned `&T`.
pub(crate) fn check_aligned(address: usize, align: usize) -> Result<()> {
    if address % align == 0 {
        return Ok(());
    }
    Err(Error::OverAligned {
        align,
        max: 1 << address.trailing_zeros(),
    })
}

/// The guard before every allocation: refuse more than the GPU has free, unless the context
/// allows oversubscription.
pub(crate) fn check_capacity(bytes: usize, free: usize, allow: bool) -> Result<()> {
    if bytes > free && !allow {
        return Err(Error::WouldOversubscribe { bytes, free });
    }
    Ok(())
}

/// Allocates `size` of storage `M` in `ctx`, for every constructor of every storage: the
/// storage's [`admit`](HasParts::admit), then the guard against taking more than the GPU has
/// free (oversubscribed managed memory can hang a shared GPU), then the storage's allocation,
/// whose addresses (host and device) must be aligned for the element type. A failure leaks
/// nothing.
pub(crate) fn allocate<M: Allocate>(ctx: &Context, size: Size) -> Result<(NonNull<u8>, M::Parts)> {
    // Before `admit`, whose first call asks every device.
    refuse_inside_stream_callback("an allocation")?;
    M::admit(ctx)?;
    ctx.bind()?;
    let (free, _) = driver::mem_info()?;
    check_capacity(size.bytes, free, ctx.oversubscription_allowed())?;
    let (host, parts) = M::alloc(ctx, size, PRIVATE)?;
    let aligned = check_aligned(host.as_ptr() as usize, size.align)
        .and_then(|()| check_aligned(M::device_ptr(host, &parts) as usize, size.align));
    if let Err(e) = aligned {
        // SAFETY: allocated just now by `M::alloc`, in `ctx`, which is current; nothing else
        // has the addresses.
        unsafe { M::free(host, &parts, PRIVATE) };
        return Err(e);
    }
    Ok((host, parts))
}

/// The error of a driver call that reported success but returned a null address.
pub(crate) fn null_pointer(call: &'static str) -> Error {
    Error::Driver {
        call,
        code: 0,
        name: "CUDA_SUCCESS".to_owned(),
        description: "returned a null pointer".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_ALIGN, NO_HOST, Size, byte_size, check_aligned, check_capacity};
    use crate::error::Error;

    #[test]
    fn byte_sizes_are_checked() {
        assert_eq!(byte_size::<f32>(3).map(Size::bytes), Ok(12));
        assert_eq!(
            byte_size::<f32>(0),
            Err(Error::ZeroSized {
                len: 0,
                elem_size: 4
            })
        );
        assert_eq!(
            byte_size::<()>(5),
            Err(Error::ZeroSized {
                len: 5,
                elem_size: 0
            })
        );
        assert_eq!(
            byte_size::<u64>(usize::MAX / 4),
            Err(Error::SizeOverflow {
                len: usize::MAX / 4,
                elem_size: 8
            })
        );
    }

    #[test]
    fn element_types_aligned_above_256_bytes_are_refused_before_allocating() {
        #[repr(C, align(256))]
        struct Ok256([u8; 16]);
        #[repr(C, align(512))]
        struct Page512([u8; 16]);
        #[repr(C, align(8192))]
        struct Page([u8; 16]);
        assert_eq!(byte_size::<Ok256>(2).map(Size::bytes), Ok(512));
        for (got, align) in [
            (byte_size::<Page512>(1), 512),
            (byte_size::<Page>(1), 8192),
            (byte_size::<Page>(0), 8192),
        ] {
            assert_eq!(got, Err(Error::OverAligned { align, max: 256 }));
        }
    }

    /// The host address of device-only memory passes every alignment check an allocation makes
    /// (every admitted element type is aligned to at most 256 bytes), and lies in the first
    /// page, which no allocation ever returns.
    #[test]
    fn the_sentinel_host_address_is_aligned_for_every_admitted_type_and_never_memory() {
        let at = NO_HOST.as_ptr() as usize;
        assert_eq!(at, MAX_ALIGN);
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 256] {
            assert_eq!(check_aligned(at, align), Ok(()), "{align}");
        }
        assert!(at < 4096);
    }

    #[test]
    fn an_address_less_aligned_than_its_type_is_refused() {
        assert_eq!(check_aligned(0x1000, 256), Ok(()));
        assert_eq!(check_aligned(0x1000, 4096), Ok(()));
        assert_eq!(
            check_aligned(0x1100, 512),
            Err(Error::OverAligned {
                align: 512,
                max: 256
            })
        );
    }

    #[test]
    fn more_than_free_is_refused_unless_allowed() {
        assert_eq!(check_capacity(10, 10, false), Ok(()));
        assert_eq!(
            check_capacity(11, 10, false),
            Err(Error::WouldOversubscribe {
                bytes: 11,
                free: 10
            })
        );
        assert_eq!(check_capacity(11, 10, true), Ok(()));
    }
}
