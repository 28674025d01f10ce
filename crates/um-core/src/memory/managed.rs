//! `Managed<T, S, M>`: one allocation, in state `S`, with storage `M`.
//!
//! This file holds what every storage shares: the allocation's bookkeeping, the constructors'
//! common path ([`Fresh`]), host access and the drop. The states and the transitions between
//! them are in [`crate::state`]; each storage's own part of allocation, transitions and freeing
//! is in its file of [`crate::storage`], behind the `HasParts` contract, called statically.
//!
//! `Managed`'s own constructors (`new`, `from_slice`, ...) allocate the default storage,
//! [`Unified`]; the other storages' constructors (`from_slice_mirrored`, `from_slice_coherent`,
//! ...) are in their files. They name their storage because Rust cannot infer a storage type
//! parameter at a call like `Managed::from_slice(&ctx, &x)`: a parameter's default does not
//! apply in an expression, so one generic `from_slice` would need a type annotation at every
//! call, and two inherent ones would make every call ambiguous (E0034). The default storage
//! keeps the short names.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut, Index, IndexMut};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::Zeroable;

use crate::driver;
use crate::driver::context::{Context, in_driver_callback};
use crate::driver::poison::{PoisonFlag, PoisonMarks};
use crate::driver::stream::{RawStream, Stream, StreamKind};
use crate::driver::sys;
use crate::error::Result;
use crate::memory::marker::{HostAccess, HostOwned, State, StreamOwned};
use crate::memory::storage::parts::{
    self, Allocate, Allocation, HostVisible, Size, Storage, allocate, byte_size,
};
use crate::memory::storage::unified::Unified;
use crate::reclaim::defer::{
    bury, capturing, defer_free, defer_free_or_keep, dropping_scope, free_after_captures,
};
use crate::reclaim::reaper::{self, Orphan};
use crate::sealed::PRIVATE;

/// A managed (unified) allocation holding a `T` (or a `[T]`), in ownership state `S`.
///
/// * `Managed<T, HostOwned>`: the CPU owns it. It dereferences to `T`; no kernel can see it.
/// * `Managed<T, StreamOwned<'s>>`: the stream with brand `'s` owns it. The CPU cannot touch
///   it; kernels launched on that stream, and only those, take it as an argument.
///
/// The state changes only through [`attach`](Managed::attach), [`sync`](Managed::sync) and
/// [`hand_off`](Managed::hand_off), which consume the value and return it in its new state (see
/// [`crate::state`]).
///
/// The storage `M` is [`Unified`] (managed memory, the default), [`Coherent`](crate::Coherent)
/// (managed memory attached globally, whose transitions make no association call),
/// [`Mirror`](crate::Mirror) (pinned host memory and device memory, copied at the transitions
/// only when needed) or [`Device`](crate::Device) (device memory alone, which the CPU reads and
/// writes only through copies; see [`crate::storage`]). States, transitions and launches are
/// the same for all four; CPU access in the host state needs a storage with a host side
/// ([`HostVisible`](crate::HostVisible)).
pub struct Managed<T: ?Sized, S: State = HostOwned, M: Storage = Unified> {
    /// The host address: of the managed allocation (which is also the device address), of the
    /// pinned half of a mirror, or, for device memory, the sentinel `parts::NO_HOST`, never
    /// dereferenced (only `HostVisible` storages' host addresses are).
    ptr: NonNull<T>,
    /// Size, context, stream association and the storage's own part.
    alloc: Allocation<M>,
    _state: PhantomData<S>,
}

// SAFETY: a `Managed` owns its allocation exclusively (like a `Box`), so moving it to another
// thread moves the `T` with it; the driver calls it makes are thread-safe and bind the context
// first. Where the state is tied to a thread (memory attached to the per-thread default
// stream), `S` is `!Send` and so is the `Managed`.
unsafe impl<T: ?Sized + Send, S: State + Send, M: Storage> Send for Managed<T, S, M> {}
// SAFETY: `&Managed` gives `&T` (host state) or a kernel argument for the owning stream, whose
// `Stream` is itself `Sync` exactly when `S` is.
// The storage part is `Send + Sync` (a mirror's one shared mutation is an atomic flag).
unsafe impl<T: ?Sized + Sync, S: State + Sync, M: Storage> Sync for Managed<T, S, M> {}

/// Where a constructor writes: a fresh allocation of `T`s, of storage `M` (host-accessible
/// where `M: HostVisible`, the only storages whose constructors write through `base`).
pub(crate) struct Fresh<T, M: Storage> {
    base: NonNull<T>,
    len: usize,
    size: Size,
    ctx: Context,
    parts: M::Parts,
}

impl<T: DeviceCopy, M: Storage + Allocate> Fresh<T, M> {
    /// Allocates `len` `T`s of storage `M` in `ctx`: the path of every constructor of every
    /// storage, with the size, alignment and capacity checks of [`byte_size`] and [`allocate`].
    pub(crate) fn new(ctx: &Context, len: usize) -> Result<Self> {
        let size = byte_size::<T>(len)?;
        let (base, parts) = allocate::<M>(ctx, size)?;
        Ok(Fresh {
            base: base.cast::<T>(),
            len,
            size,
            ctx: ctx.clone(),
            parts,
        })
    }

    /// The allocation of `len` elements as a host-owned slice whose elements are not written
    /// yet: for storages without a host side, whose constructors write through the device
    /// address.
    ///
    /// # Safety
    /// The caller writes every element before the buffer is read, or never lets it be read
    /// (drops or leaks it).
    pub(crate) unsafe fn into_unwritten_slice(self) -> Managed<[T], HostOwned, M> {
        let ptr = NonNull::slice_from_raw_parts(self.base, self.len);
        self.into_managed(ptr)
    }

    /// The allocation as `Managed`, host-owned, with `ptr` (its base address) as its value.
    fn into_managed<U: ?Sized>(self, ptr: NonNull<U>) -> Managed<U, HostOwned, M> {
        Managed {
            ptr,
            alloc: Allocation {
                bytes: self.size.bytes(),
                ctx: self.ctx,
                stream: RawStream::NONE,
                parts: self.parts,
                handed_from: PoisonMarks::default(),
            },
            _state: PhantomData,
        }
    }
}

/// The writes of the constructors of storages with a host side, through the host address.
impl<T: DeviceCopy, M: HostVisible + Allocate> Fresh<T, M> {
    /// The allocation (of one `T`) holding `value`.
    pub(crate) fn value(self, value: T) -> Managed<T, HostOwned, M> {
        debug_assert_eq!(self.len, 1);
        // SAFETY: `base` is a fresh host-accessible allocation (`M: HostVisible`) of at least
        // `size_of::<T>()` bytes, aligned for `T`: `byte_size` refused any `T` aligned above 256, and `allocate`
        // checked its addresses against `align_of::<T>()`.
        unsafe { self.base.as_ptr().write(value) };
        let ptr = self.base;
        self.into_managed(ptr)
    }

    /// The allocation (of one `T`) holding zero bytes.
    pub(crate) fn zeroed(self) -> Managed<T, HostOwned, M>
    where
        T: Zeroable,
    {
        debug_assert_eq!(self.len, 1);
        self.write_zeroes();
        let ptr = self.base;
        self.into_managed(ptr)
    }

    /// The allocation of `len` elements, element `i` set to `f(i)`. If `f` panics, the
    /// allocation leaks (it is never read uninitialised).
    pub(crate) fn filled(self, mut f: impl FnMut(usize) -> T) -> Managed<[T], HostOwned, M> {
        for i in 0..self.len {
            // SAFETY: `i < len`, inside the fresh allocation of `len` elements, each written
            // once before the slice is ever read.
            unsafe { self.base.as_ptr().add(i).write(f(i)) };
        }
        let ptr = NonNull::slice_from_raw_parts(self.base, self.len);
        self.into_managed(ptr)
    }

    /// The allocation of `len` zeroed elements.
    pub(crate) fn zeroed_slice(self) -> Managed<[T], HostOwned, M>
    where
        T: Zeroable,
    {
        self.write_zeroes();
        let ptr = NonNull::slice_from_raw_parts(self.base, self.len);
        self.into_managed(ptr)
    }

    fn write_zeroes(&self) {
        // SAFETY: fresh host-accessible allocation (`M: HostVisible`) of `size` bytes; the
        // callers only ask for types for which all-zero is a valid value (`Zeroable`).
        unsafe {
            self.base
                .cast::<u8>()
                .as_ptr()
                .write_bytes(0, self.size.bytes())
        };
    }
}

impl<T: DeviceCopy> Managed<T, HostOwned> {
    /// Allocates managed memory attached to the host and moves `value` into it.
    pub fn new(ctx: &Context, value: T) -> Result<Self> {
        Ok(Fresh::<T, Unified>::new(ctx, 1)?.value(value))
    }

    /// Allocates managed memory attached to the host, filled with zero bytes.
    pub fn zeroed(ctx: &Context) -> Result<Self>
    where
        T: Zeroable,
    {
        Ok(Fresh::<T, Unified>::new(ctx, 1)?.zeroed())
    }
}

impl<T: DeviceCopy> Managed<[T], HostOwned> {
    /// Allocates `len` elements attached to the host, element `i` set to `f(i)`.
    ///
    /// If `f` panics, the allocation leaks (it is never read uninitialised).
    pub fn from_fn(ctx: &Context, len: usize, f: impl FnMut(usize) -> T) -> Result<Self> {
        Ok(Fresh::<T, Unified>::new(ctx, len)?.filled(f))
    }

    /// Allocates a copy of `data`, attached to the host.
    pub fn from_slice(ctx: &Context, data: &[T]) -> Result<Self> {
        Self::from_fn(ctx, data.len(), |i| data[i])
    }

    /// Allocates the items of `iter`, attached to the host.
    ///
    /// Not `from_iter`: that is [`FromIterator`]'s method name, and `FromIterator` has no
    /// context to allocate in. `_in` says that it takes the context, as `Vec::new_in` takes its
    /// allocator.
    pub fn from_iter_in(ctx: &Context, iter: impl IntoIterator<Item = T>) -> Result<Self> {
        let items: Vec<T> = iter.into_iter().collect();
        Self::from_slice(ctx, &items)
    }

    /// Allocates `len` zeroed elements, attached to the host.
    pub fn zeroed_slice(ctx: &Context, len: usize) -> Result<Self>
    where
        T: Zeroable,
    {
        Ok(Fresh::<T, Unified>::new(ctx, len)?.zeroed_slice())
    }
}

impl<'s, T, K: StreamKind, M: Storage> Managed<[T], StreamOwned<'s, K>, M> {
    /// An allocation of `len` `T`s born on `stream` (its allocation enqueued there): owned by
    /// that stream from the start, as if attached to it.
    ///
    /// # Safety
    /// `host` and `parts` are one live allocation of storage `M` of `stream`'s context, of
    /// `size` bytes (`byte_size::<T>(len)`), enqueued on `stream`, that nothing else owns; every
    /// element is written by work enqueued on `stream` before any other use of it (or it is
    /// never read).
    pub(crate) unsafe fn born_on(
        stream: &Stream<'s, K>,
        host: NonNull<u8>,
        parts: M::Parts,
        size: Size,
        len: usize,
    ) -> Self {
        Managed {
            ptr: NonNull::slice_from_raw_parts(host.cast::<T>(), len),
            alloc: Allocation {
                bytes: size.bytes(),
                ctx: stream.context().clone(),
                stream: stream.raw(),
                parts,
                handed_from: PoisonMarks::default(),
            },
            _state: PhantomData,
        }
    }
}

impl<T: ?Sized, S: State, M: Storage> Managed<T, S, M> {
    /// The largest alignment an element type may have: every allocation of every storage is
    /// aligned to 256 bytes (the driver's guarantee for `cuMemAlloc` and `cuMemAllocManaged`,
    /// and checked on every address). Constructors refuse a more aligned `T` with
    /// [`Error::OverAligned`](crate::Error::OverAligned) before they allocate.
    pub const MAX_ALIGN: usize = parts::MAX_ALIGN;

    /// Size of the allocation in bytes (of each half, for a mirror).
    pub fn size_in_bytes(&self) -> usize {
        self.alloc.bytes
    }

    /// The context the memory was allocated in.
    pub fn context(&self) -> &Context {
        &self.alloc.ctx
    }

    /// Bytes of memory the allocation holds: its size for unified, coherent and device memory,
    /// twice its size (host and device halves) for a mirror.
    pub fn footprint_in_bytes(&self) -> usize {
        M::footprint(self.alloc.bytes)
    }

    /// The address kernels use: the managed address (one for host and device), a mirror's
    /// device half, or the device allocation.
    #[inline]
    pub(crate) fn device_ptr(&self) -> sys::CUdeviceptr {
        M::device_ptr(self.host_ptr(), &self.alloc.parts)
    }

    /// The host address (for managed memory, also the device address; for device memory, the
    /// sentinel `parts::NO_HOST`, which only the storage's own methods receive, and ignore).
    #[inline]
    pub(crate) fn host_ptr(&self) -> NonNull<u8> {
        self.ptr.cast::<u8>()
    }

    /// What the storage sees of the allocation, for the transitions (`crate::state`).
    #[inline]
    pub(crate) fn allocation(&self) -> &Allocation<M> {
        &self.alloc
    }

    /// As `allocation`, mutable.
    #[inline]
    pub(crate) fn allocation_mut(&mut self) -> &mut Allocation<M> {
        &mut self.alloc
    }

    /// A launch takes the buffer as `&mut`: the storage marks it (a mirror's `sync` copies the
    /// device half back).
    #[inline]
    pub(crate) fn mark_device_written(&self) {
        M::device_written(&self.alloc.parts, PRIVATE);
    }

    #[inline]
    pub(crate) fn stream(&self) -> RawStream {
        self.alloc.stream
    }

    /// The context of the stream that owns the memory: the allocation's own, except after a
    /// handoff to another device. Every stream-ordered call on the owner needs it current (and
    /// the per-thread handle names a stream of the current context).
    pub(crate) fn owner_context(&self) -> &Context {
        if S::ON_STREAM {
            // SAFETY: in a stream-owned state the owning stream is alive while the memory is: its
            // brand is in `S`.
            if let Some(owner) = unsafe { self.alloc.stream.events() } {
                return owner.context();
            }
        }
        &self.alloc.ctx
    }

    /// Whether the stream that owns the memory is poisoned (`driver/poison.rs`), or one it was
    /// handed off from since it was last host-owned: work there was aborted, and the memory
    /// must be leaked, never freed or given to the CPU.
    pub(crate) fn owner_poisoned(&self) -> bool {
        // SAFETY: in a stream-owned state the owning stream is alive while the memory is (its
        // brand is in `S`); host-owned memory is associated with no live stream it could ask.
        S::ON_STREAM
            && (unsafe { self.alloc.stream.is_poisoned() }
                || self.alloc.handed_from.iter().any(|f| f.is_set()))
    }

    /// The poison marks of the owning stream and of those the memory was handed off from, for
    /// an orphan to keep.
    fn owner_poison(&self) -> Vec<Arc<PoisonFlag>> {
        if !S::ON_STREAM {
            return Vec::new();
        }
        let kept = self.alloc.handed_from.iter().cloned();
        // SAFETY: as in `owner_poisoned`.
        kept.chain(unsafe { self.alloc.stream.poison_flag() })
            .collect()
    }

    /// Whether work queued so far on the owning stream, or on one the memory was handed off
    /// from, may yet be aborted: a poison mark of them is set, or a `Poisoner` of one exists
    /// (only a poisoner sets a mark, and a library takes one before it enqueues work it may
    /// abort). Where it is `false`, the memory may be freed in the owner's stream order.
    fn abort_possible(&self) -> bool {
        // SAFETY: as in `owner_poisoned`.
        S::ON_STREAM
            && (unsafe { self.alloc.stream.events() }.is_some_and(|e| e.poison().may_be_set())
                || self.alloc.handed_from.iter().any(|f| f.may_be_set()))
    }

    /// Keeps the poison mark of the owning stream before the memory is handed to another: the
    /// work queued there may be aborted after the new owner's wait has passed.
    pub(crate) fn keep_owner_poison(&mut self) {
        if !S::ON_STREAM {
            return;
        }
        // SAFETY: as in `owner_poisoned`.
        if let Some(events) = unsafe { self.alloc.stream.events() } {
            self.alloc.handed_from.keep(events.poison());
        }
    }

    /// Gives the allocation up without freeing it, for a free that waits for its stream without
    /// blocking a thread (see `crate::reclaim`).
    pub(crate) fn into_orphan(mut self) -> Orphan {
        // The kept marks move to the orphan (`this` below is never dropped, so a list left in it
        // would leak), and the owner's mark joins them.
        let mut poison: Vec<_> = std::mem::take(&mut self.alloc.handed_from)
            .into_iter()
            .collect();
        poison.extend(self.owner_poison());
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the orphan's free is the allocation's only one.
        let orphan = unsafe { M::orphan(this.host_ptr(), &this.alloc, PRIVATE) }.watching(poison);
        // SAFETY: as in `retype`: `this` is never used or dropped again, and the context is read
        // out exactly once (the orphan holds a clone); the storage's part frees nothing.
        drop(unsafe { ptr::read(&this.alloc.ctx) });
        orphan
    }

    /// The same allocation in state `S2`, associated with `stream`. Only `state.rs` calls this,
    /// once the driver calls that justify the new state have been made.
    pub(crate) fn retype<S2: State>(self, stream: RawStream) -> Managed<T, S2, M> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the bookkeeping (with the context and
        // the storage part) is read out exactly once, so ownership of the allocation, the
        // context and the part passes to the new value.
        let mut alloc = unsafe { ptr::read(&this.alloc) };
        if !S2::ON_STREAM {
            // Host-owned only after a wait that found every kept mark unset (`sync`, `sync_all`,
            // the sync futures): the work of those streams is done with the memory.
            alloc.handed_from.clear();
        }
        Managed {
            ptr: this.ptr,
            alloc: Allocation { stream, ..alloc },
            _state: PhantomData,
        }
    }
}

impl<T, S: State, M: Storage> Managed<[T], S, M> {
    /// Number of elements (metadata: readable in every state).
    pub fn len(&self) -> usize {
        self.ptr.len()
    }

    /// Whether the slice has no elements (never true: empty allocations are refused).
    pub fn is_empty(&self) -> bool {
        self.ptr.len() == 0
    }
}

// Host access is written generically over the state with the bound `S: HostAccess`, which
// only `HostOwned` satisfies (a sealed trait with that one impl): these impls exist in the host
// state alone, exactly as if they named `HostOwned`, and a stream-owned buffer has none of them.
// The bound makes the compiler report `HostAccess`'s message ("sync it first") where it reports
// the bound at all (indexing, `iter`, `iter_mut`; see `HostAccess`). The storage is bounded by
// `M: HostVisible` (sealed, not implemented by `Device`): device memory has no host side, so a
// device buffer has none of them in any state.

impl<T: ?Sized, S: HostAccess, M: HostVisible> Deref for Managed<T, S, M> {
    type Target = T;
    fn deref(&self) -> &T {
        #[cfg(feature = "model")]
        crate::driver::model::host_access(self.ptr.as_ptr().cast::<u8>() as usize);
        // SAFETY: `M: HostVisible`: the host address is host memory (managed or pinned), not
        // the sentinel of a storage without a host side. `S: HostAccess` holds only for
        // `HostOwned`, the host state, in which no kernel
        // or copy can touch the allocation: only stream-owned memory is passed to kernels, copies
        // are enqueued only by `attach` (which makes the memory stream-owned) and by `sync`
        // (which waits for them), and memory becomes host-owned only after its stream was
        // synchronized (and, where the device lacks concurrent managed access, re-attached to
        // the host). The memory is host-accessible (managed or pinned), initialised by every
        // constructor, and owned exclusively by `self`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ?Sized, S: HostAccess, M: HostVisible> DerefMut for Managed<T, S, M> {
    fn deref_mut(&mut self) -> &mut T {
        // The host may write: the storage marks it (a mirror's next `attach` copies).
        M::host_written(&mut self.alloc.parts, PRIVATE);
        #[cfg(feature = "model")]
        crate::driver::model::host_access(self.ptr.as_ptr().cast::<u8>() as usize);
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { self.ptr.as_mut() }
    }
}

/// `buf[i]`, `buf[a..b]`: the host-owned contents, indexed (through `Deref`).
impl<T: ?Sized + Index<I>, S: HostAccess, M: HostVisible, I> Index<I> for Managed<T, S, M> {
    type Output = T::Output;
    fn index(&self, index: I) -> &T::Output {
        self.deref().index(index)
    }
}

/// `buf[i] = x`: the host-owned contents, indexed for writing (through `DerefMut`, which marks a
/// mirror written).
impl<T: ?Sized + IndexMut<I>, S: HostAccess, M: HostVisible, I> IndexMut<I> for Managed<T, S, M> {
    fn index_mut(&mut self, index: I) -> &mut T::Output {
        self.deref_mut().index_mut(index)
    }
}

// The bound is on each method, not on the `impl`: rustc reports a method's own unmet bound with
// the trait's message, an `impl`'s only as "the method exists but its trait bounds were not
// satisfied".
impl<T, S: State, M: Storage> Managed<[T], S, M> {
    /// The elements, on the CPU: the slice's [`iter`](slice::iter) (through `Deref`), here so
    /// that `buf.iter()` on a stream-owned buffer says to `sync` it first.
    pub fn iter(&self) -> std::slice::Iter<'_, T>
    where
        S: HostAccess,
        M: HostVisible,
    {
        self.deref().iter()
    }

    /// The elements, on the CPU, mutably: the slice's [`iter_mut`](slice::iter_mut) (through
    /// `DerefMut`, which marks a mirror written), here so that `buf.iter_mut()` on a
    /// stream-owned buffer says to `sync` it first.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T>
    where
        S: HostAccess,
        M: HostVisible,
    {
        self.deref_mut().iter_mut()
    }
}

impl<T: ?Sized, S: State, M: Storage> Drop for Managed<T, S, M> {
    fn drop(&mut self) {
        if S::IN_CAPTURE {
            // Owned by a capture stream: nothing may be freed or waited for while the capture
            // runs (the driver refuses it), and the eager stream that owned the buffer before the
            // capture may still use it. The capture scope takes it and frees it once the capture
            // has ended and that stream is done; without a scope (never expected), it leaks.
            // SAFETY: if `bury` takes the orphan, this drop returns without freeing; otherwise the
            // orphan comes back and is dropped unfreed (a leak), and so does this drop.
            // The marks of the streams it was handed off from before the capture go with it.
            let orphan = unsafe { M::orphan(self.host_ptr(), &self.alloc, PRIVATE) }
                .watching(self.alloc.handed_from.clone());
            let _ = bury(self.alloc.stream.id, orphan);
            return;
        }
        if S::ON_STREAM {
            // Work on the owning stream was aborted (a poisoned stream): it may still touch the
            // memory whether or not the stream is idle. Leak it.
            if self.owner_poisoned() {
                return;
            }
            // The owner's context: after a `hand_off` to another device it is not the
            // allocation's.
            let owner = self.owner_context();
            // On a thread that is capturing, the wait below is refused and would invalidate the
            // capture. The memory goes to the reaper behind a callback enqueued now on its (eager)
            // stream, which is alive here: its brand is on this buffer. Should that fail, it is
            // kept until the device's captures and this thread's have ended, and freed after a
            // wait for the owner's context; never waited for here. (`capturing` also holds in a
            // thread-local destructor that runs while a capture is open.)
            if capturing() {
                // SAFETY: the orphan takes the allocation over (freed once, by the reaper or
                // after the device's wait, or leaked), and this drop returns without freeing.
                let orphan = unsafe { M::orphan(self.host_ptr(), &self.alloc, PRIVATE) }
                    .watching(self.owner_poison());
                defer_free_or_keep(owner, self.alloc.stream, orphan);
                return;
            }
            // Memory the storage frees in stream order (a pool's): its free is enqueued on the
            // owner, after the work queued there (and, through the handoffs' events, on the
            // streams before it), and nothing waits. Only where none of that work can still be
            // aborted: an aborted stream may go idle, and reach the free, while other work still
            // touches the memory. Where it can, the free waits without blocking a thread for the
            // stream to pass this point with every mark unset (a callback, then the reaper).
            if M::FREES_IN_STREAM_ORDER {
                if self.abort_possible() {
                    // SAFETY: if `defer_free` takes the orphan, this drop returns without
                    // freeing; otherwise the orphan comes back and is dropped unfreed, and the
                    // drop goes on.
                    let orphan = unsafe { M::orphan(self.host_ptr(), &self.alloc, PRIVATE) }
                        .watching(self.owner_poison());
                    if defer_free(owner, self.alloc.stream, orphan).is_ok() {
                        return;
                    }
                } else if owner.bind().is_ok()
                    // SAFETY: stream-owned by `self.alloc.stream`, alive (its brand is in `S`),
                    // its context (`owner`) current; no mark is set and none can be (no
                    // poisoner), so no work queued so far can be aborted; on `true` this drop
                    // returns, so the free is the allocation's only one.
                    && unsafe { M::free_in_stream_order(self.host_ptr(), &self.alloc, PRIVATE) }
                {
                    return;
                }
            }
            // While an unfinished async scope is dropped, the memory goes to the reaper instead
            // of being waited for here (see `crate::reclaim::defer`).
            if dropping_scope() {
                // SAFETY: if `defer_free` takes the orphan, this drop returns without freeing;
                // otherwise the orphan comes back and is dropped unfreed, and the drop goes on.
                let orphan = unsafe { M::orphan(self.host_ptr(), &self.alloc, PRIVATE) }
                    .watching(self.owner_poison());
                if defer_free(owner, self.alloc.stream, orphan).is_ok() {
                    return;
                }
            }
            // A kernel queued on the owning stream may still use the memory: wait for it
            // first. If the wait fails (a sticky error from a faulting kernel, say), the GPU
            // may still hold the memory, so it is leaked rather than freed.
            if owner.bind().is_err()
                || driver::stream_synchronize(self.alloc.stream.handle).is_err()
                // Poisoned during the wait: the stream may have gone idle because its work was
                // aborted (the poisoner sets the mark before it aborts).
                || self.owner_poisoned()
            {
                return;
            }
        }
        // Only host-owned memory gets here (a stream-owned drop that cannot free here returned
        // above), and no GPU work uses host-owned memory, so it may be freed at any time, on
        // any thread. Inside um's stream callback (a waker that drops a host-owned buffer)
        // CUDA allows no call: the reaper thread frees it instead.
        if in_driver_callback() {
            // SAFETY: the orphan takes the allocation over; the reaper frees it once (`ok`), and
            // this drop returns without freeing.
            let orphan = unsafe { M::orphan(self.host_ptr(), &self.alloc, PRIVATE) };
            reaper::free_elsewhere(orphan);
            return;
        }
        // On a thread that captures (inside a capture closure, relaxed or not, or a destructor
        // run there) the driver refuses the free, which would lose the memory for good and
        // invalidate the capture: it is freed on this thread once its captures have ended.
        if capturing() {
            // SAFETY: the orphan takes the allocation over (freed once, later, or leaked if the
            // thread exits inside the capture), and this drop returns without freeing; no GPU
            // work uses host-owned memory.
            unsafe { free_after_captures(M::orphan(self.host_ptr(), &self.alloc, PRIVATE)) };
            return;
        }
        // Without the context nothing can be freed safely: leak.
        if self.alloc.ctx.bind().is_err() {
            return;
        }
        // SAFETY: the allocation came from the storage's `alloc` (through `allocate`); `retype`
        // and `into_orphan` hand ownership on without dropping, so this is the one free; its
        // context is current; no kernel or copy can use it any more (host state, or its stream
        // just completed).
        unsafe { M::free(self.host_ptr(), &self.alloc.parts, PRIVATE) };
    }
}
