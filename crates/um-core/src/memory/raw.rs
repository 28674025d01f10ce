//! The door to libraries `um` does not wrap: the device address of a stream-owned buffer, for a
//! call enqueued on the buffer's own stream ([`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md)).
//!
//! Getting an address is safe, as `slice::as_ptr` is; using it is a foreign call, and so
//! `unsafe`. The types still do what they can: only a stream-owned buffer has an address (a
//! host-owned one is the CPU's), the borrow says how long the address may be used, and the
//! `&mut` form marks mirrored memory written, so that its `sync` copies the device half back.

use std::marker::PhantomData;

use crate::driver::stream::{Stream, StreamKind};
use crate::memory::managed::Managed;
use crate::memory::marker::StreamOwned;
use crate::memory::storage::Storage;

/// The device address and length of a stream-owned buffer that a foreign call may read, for
/// as long as the borrow `'b` (see [`Managed::as_device_ptr`]).
#[derive(Debug, Clone, Copy)]
pub struct DevicePtr<'b, T> {
    address: u64,
    len: usize,
    _borrow: PhantomData<&'b [T]>,
}

/// The device address and length of a stream-owned buffer that a foreign call may read and
/// write, for as long as the borrow `'b` (see [`Managed::as_device_ptr_mut`]).
#[derive(Debug)]
pub struct DevicePtrMut<'b, T> {
    address: u64,
    len: usize,
    _borrow: PhantomData<&'b mut [T]>,
}

impl<T> DevicePtr<'_, T> {
    /// The address (`CUdeviceptr`), as the driver API and most libraries take it.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// The address as a typed pointer, as the runtime API and cuBLAS take it. Device memory:
    /// never dereference it on the CPU.
    pub fn as_ptr(&self) -> *const T {
        self.address as usize as *const T
    }

    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements (never: `um` refuses empty allocations).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T> DevicePtrMut<'_, T> {
    /// The address (`CUdeviceptr`), as the driver API and most libraries take it.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// The address as a typed pointer, as the runtime API and cuBLAS take it. Device memory:
    /// never dereference it on the CPU.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.address as usize as *mut T
    }

    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements (never: `um` refuses empty allocations).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<'s, T, K: StreamKind, M: Storage> Managed<[T], StreamOwned<'s, K>, M> {
    /// The buffer's device address, for a foreign call (a cuBLAS or NCCL call, a kernel launched
    /// by another library) that only **reads** it.
    ///
    /// What the call may do with it, and what makes that sound (the caller of the foreign,
    /// `unsafe` function guarantees it):
    /// * enqueue work **on this buffer's stream** (its [`Stream::as_raw`](crate::Stream::as_raw)),
    ///   and on no other stream: the stream is what keeps every other use of the memory out;
    /// * read at most [`len`](DevicePtr::len) elements from the address;
    /// * only while the borrow lasts: once it ends, the buffer may be handed off, synced (the
    ///   CPU then owns it) or dropped (freed after the stream's work, including the call's).
    ///
    /// It never lets safe code reach the buffer from the CPU or from another stream: a
    /// host-owned buffer has no address to give, and the address itself can only be used by
    /// `unsafe` code.
    pub fn as_device_ptr(&self) -> DevicePtr<'_, T> {
        DevicePtr {
            address: self.device_ptr(),
            len: self.len(),
            _borrow: PhantomData,
        }
    }

    /// As [`as_device_ptr`](Managed::as_device_ptr), for a call that may also **write** the
    /// buffer (every element it writes from one thread of its own, or atomically). Mirrored
    /// memory is marked written, so that its next `sync` copies the device half back.
    pub fn as_device_ptr_mut(&mut self) -> DevicePtrMut<'_, T> {
        self.mark_device_written();
        DevicePtrMut {
            address: self.device_ptr(),
            len: self.len(),
            _borrow: PhantomData,
        }
    }

    /// Whether `stream` owns the buffer: [`Stream::owns`], the same check, asked from the
    /// buffer's side. Kept for the programs that call it; one check has one name.
    #[deprecated(
        since = "0.1.0",
        note = "the same check as `stream.owns(&buffer)`: use that"
    )]
    pub fn is_owned_by(&self, stream: &Stream<'s, K>) -> bool {
        self.stream().id == stream.id()
    }
}

impl<'s, K: StreamKind> Stream<'s, K> {
    /// Whether `buffer` is owned by this stream, and not by another stream of the same stream
    /// set ([`with_stream_set`](crate::Context::with_stream_set), whose streams share a brand, so
    /// that the type alone cannot tell them apart). For a foreign call that takes device addresses
    /// ([`Managed::as_device_ptr`]): `um`'s own launches make this check on every buffer
    /// (`Error::StreamMismatch`), and a library wrapper must make it too before it enqueues
    /// work on this stream (`um-cublas` does). For singly created streams it is always `true`.
    ///
    /// The one ownership check of `um`'s API: the brand already says as much for a stream of
    /// its own (`with_stream`); between the streams of a stream set (`with_stream_set`,
    /// `with_stream_set_across`), which share a brand, only this run-time check does.
    pub fn owns<T: ?Sized, M: Storage>(&self, buffer: &Managed<T, StreamOwned<'s, K>, M>) -> bool {
        buffer.stream().id == self.raw().id
    }
}
