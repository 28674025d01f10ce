//! [`PinnedWord`]: a few bytes of page-locked host memory that device work writes and the host
//! reads once it has waited for that work. A library built on `um` asks for a result there in
//! device pointer mode (`um_cublas::Blas::dot`: the reduction's last kernel writes the host
//! memory itself), so that bringing one value to the host costs one wait and no copy.

use std::marker::PhantomData;
use std::ptr::NonNull;

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::{AnyBitPattern, NoUninit};

use crate::driver;
use crate::driver::context::{Context, in_driver_callback, refuse_inside_stream_callback};
use crate::error::Result;
use crate::memory::storage::parts::null_pointer;
use crate::reclaim::defer::free_after_captures;
use crate::reclaim::reaper::{self, Orphan};

/// How many bytes a [`PinnedWord`] holds: room for any scalar a library writes (an `f64`, a
/// complex `f64`, an index).
pub const PINNED_WORD_BYTES: usize = 16;

/// [`PINNED_WORD_BYTES`] bytes of page-locked host memory (`cuMemAllocHost`) of one context,
/// zeroed when made, at an address that device work of that context can write (with unified
/// addressing, which every device um runs on has, a page-locked allocation's host address is
/// also its device address).
///
/// It is for a library built on `um` that asks a routine for a result "in device memory" and
/// reads it on the host after waiting for the routine's stream: the routine's last kernel writes
/// host memory directly, where host pointer mode would copy the result from the device after it.
/// Handing [`as_device_ptr`](PinnedWord::as_device_ptr) to device work is `unsafe` in whatever
/// takes it; that work must have completed before the word is read, written or dropped.
///
/// Its drop frees the memory where the driver accepts the free: at once; on a thread that
/// captures, once its captures have ended; inside um's stream callback, on the reaper thread.
/// [`leak`](PinnedWord::leak) gives it up unfreed, for a word that work may still write (a wait
/// for it failed).
pub struct PinnedWord {
    ptr: NonNull<u8>,
    ctx: Context,
    /// `!Sync`: one thread at a time reads and writes it.
    _one_thread: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the word is host memory of a context, not tied to a thread: any thread may read,
// write or free it (its drop makes its context current first). `!Sync` keeps its reads and
// writes on one thread at a time.
unsafe impl Send for PinnedWord {}

impl PinnedWord {
    /// A zeroed word in `ctx`. Refused inside um's stream callback (no CUDA call is allowed
    /// there: [`Error::InsideDriverCallback`](crate::Error::InsideDriverCallback)); the driver's
    /// error where the allocation fails.
    pub fn new(ctx: &Context) -> Result<PinnedWord> {
        refuse_inside_stream_callback("a pinned word")?;
        ctx.bind()?;
        let ptr = driver::mem_alloc_pinned(PINNED_WORD_BYTES)?;
        let Some(ptr) = NonNull::new(ptr.cast::<u8>()) else {
            return Err(null_pointer("cuMemAllocHost"));
        };
        // SAFETY: a fresh allocation of `PINNED_WORD_BYTES` bytes that nothing else has.
        unsafe { ptr.as_ptr().write_bytes(0, PINNED_WORD_BYTES) };
        Ok(PinnedWord {
            ptr,
            ctx: ctx.clone(),
            _one_thread: PhantomData,
        })
    }

    /// The context the word belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The address device work of the word's context writes a `T` to (a `T` of at most
    /// [`PINNED_WORD_BYTES`] bytes and alignment: a larger one does not build; `cargo check`,
    /// which evaluates no constant of a generic function, does not see it). The allocation is
    /// page-aligned.
    #[inline]
    pub fn as_device_ptr<T: DeviceCopy>(&self) -> *mut T {
        const { assert_fits::<T>() };
        self.ptr.as_ptr().cast::<T>()
    }

    /// Writes `value` at the start of the word (a `T` that fits, as
    /// [`as_device_ptr`](PinnedWord::as_device_ptr)).
    ///
    /// # Safety
    /// No device work that reads or writes the word may still run: every such work was waited
    /// for since it was enqueued; and no other thread reads or writes it through the address
    /// [`as_device_ptr`](PinnedWord::as_device_ptr) gave.
    #[inline]
    pub unsafe fn write<T: DeviceCopy + NoUninit>(&self, value: T) {
        const { assert_fits::<T>() };
        // SAFETY: a `T` fits the allocation and its alignment (the constant above; the
        // allocation is page-aligned); no other agent touches the word (the caller), and `!Sync`
        // keeps other threads out.
        unsafe { self.ptr.as_ptr().cast::<T>().write_volatile(value) }
    }

    /// The `T` at the start of the word (any bytes are a `T`: `AnyBitPattern`).
    ///
    /// # Safety
    /// No device work that writes the word may still run: every such work was waited for since
    /// it was enqueued, so what it wrote is visible to the host; and no other thread writes it
    /// through the address [`as_device_ptr`](PinnedWord::as_device_ptr) gave.
    #[inline]
    pub unsafe fn read<T: DeviceCopy + AnyBitPattern>(&self) -> T {
        const { assert_fits::<T>() };
        // SAFETY: as in `write`; the word's bytes are initialised (zeroed when made) and any
        // bytes are a `T`.
        unsafe { self.ptr.as_ptr().cast::<T>().read_volatile() }
    }

    /// Gives the word up without freeing it: for a word that device work may still write (a
    /// wait for that work failed).
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

/// Stops the build of a use of a word as a `T` that does not fit it: more than
/// [`PINNED_WORD_BYTES`] bytes or alignment (evaluated as a constant of each use).
const fn assert_fits<T>() {
    assert!(
        size_of::<T>() <= PINNED_WORD_BYTES && align_of::<T>() <= PINNED_WORD_BYTES,
        "a PinnedWord holds at most 16 bytes, aligned to at most 16"
    );
}

impl Drop for PinnedWord {
    fn drop(&mut self) {
        let address = self.ptr.as_ptr() as usize;
        let free = move || {
            // SAFETY: the word's own allocation, freed once (this drop), with its context current
            // (`Orphan::free`); no device work uses it any more (the type's contract: work that
            // writes it was waited for, or the word was leaked). Errors are ignored: drop never
            // panics.
            let _ = unsafe { driver::mem_free_pinned(address as *mut std::ffi::c_void) };
        };
        // SAFETY: `free` frees this allocation and nothing else, once, with the context current;
        // no work uses it (above); nothing else frees it (this drop gives it up).
        let orphan = unsafe { Orphan::new(self.ctx.clone(), free) };
        if in_driver_callback() {
            // No CUDA call is allowed inside um's stream callback: the reaper thread frees it.
            reaper::free_elsewhere(orphan);
        } else {
            // SAFETY: no work uses the memory (above); on a capturing thread the free is made
            // once its captures have ended, elsewhere now.
            unsafe { free_after_captures(orphan) };
        }
    }
}

impl std::fmt::Debug for PinnedWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedWord")
            .field("device", &self.ctx.info().ordinal)
            .finish_non_exhaustive()
    }
}
