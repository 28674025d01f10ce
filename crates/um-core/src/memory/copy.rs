//! Copies and fills on the device between buffers one stream owns: [`Stream::copy`],
//! [`Stream::fill`] and [`Stream::fill_zero`], enqueued on that stream (`cuMemcpyAsync`,
//! `cuMemsetD8Async`, `D16`, `D32`).
//!
//! They take buffers as a launch does: `&Managed<[T], StreamOwned<'s, K>, M>` to read and
//! `&mut` to write, of the stream's brand `'s` and kind `K`, of any storage. A buffer of another
//! stream carries another brand and does not compile; between the streams of a stream set
//! (one brand) the owner is checked at run time ([`Error::StreamMismatch`]). The destination is
//! marked written as a `&mut` launch argument is, so that a mirror's `sync` copies its device
//! half back. On a capture stream they are recorded as copy and memset nodes, and a graph
//! marks their destinations written again at every replay.

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::{self, NoUninit, Zeroable};

use crate::driver::stream::{Stream, StreamKind};
use crate::driver::{self, Memset};
use crate::error::{Error, Result};
use crate::memory::managed::Managed;
use crate::memory::marker::StreamOwned;
use crate::memory::storage::Storage;

impl<'s, K: StreamKind> Stream<'s, K> {
    /// Enqueues a copy of `src` into `dst` on this stream, on the device (`cuMemcpyAsync`):
    /// ordered after the work queued on the stream before it, before the work queued after it.
    /// Both buffers are this stream's, of any storages; `dst` is marked written (a mirror's
    /// `sync` copies it back). Waits for nothing.
    ///
    /// Refused before anything is enqueued: buffers of different lengths
    /// ([`Error::CopyLengths`]), a buffer of another stream of a stream set
    /// ([`Error::StreamMismatch`]: `argument` 0 is `src`, 1 is `dst`), a poisoned stream
    /// ([`Error::StreamPoisoned`]).
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// # use um_core::{Context, Managed, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let a = Managed::from_slice(&ctx, &[1u32, 2, 3])?;
    /// let b = Managed::from_slice_mirrored(&ctx, &[0u32; 3])?;
    /// let (a, b) = ctx.with_stream(StreamOptions::new(), |s| {
    ///     let (a, mut b) = (a.attach(s)?, b.attach(s)?);
    ///     s.copy(&a, &mut b)?;
    ///     s.sync_all((a, b))
    /// })?;
    /// assert_eq!(&b[..], &a[..]);
    /// # Ok(()) }
    /// ```
    pub fn copy<T: DeviceCopy, M1: Storage, M2: Storage>(
        &self,
        src: &Managed<[T], StreamOwned<'s, K>, M1>,
        dst: &mut Managed<[T], StreamOwned<'s, K>, M2>,
    ) -> Result<()> {
        self.check_writable_here(&[src.stream().id, dst.stream().id])?;
        if src.len() != dst.len() {
            return Err(Error::CopyLengths {
                src: src.len(),
                dst: dst.len(),
            });
        }
        self.context().bind()?;
        dst.mark_device_written();
        // SAFETY: two distinct allocations (`&` and `&mut` of two `Managed`s, each of which
        // owns its allocation alone) of `src.size_in_bytes()` bytes each (same element type,
        // same length), device-accessible (the address a kernel gets); both are owned by this
        // stream (brand, and the ids above), so nothing else uses them until the stream has run
        // the copy, and neither is freed before that (a stream-owned buffer's drop waits for its
        // stream; a captured one is held by the graph). The stream is alive (borrowed), of the
        // current context.
        unsafe {
            driver::memcpy_async(
                dst.device_ptr(),
                src.device_ptr(),
                src.size_in_bytes(),
                self.raw().handle,
            )
        }
    }

    /// Enqueues a fill of every element of `buf` with `value` on this stream, on the device:
    /// ordered as [`copy`](Stream::copy) is, and `buf` marked written. The driver's fills repeat
    /// one byte, 16-bit or 32-bit word (`cuMemsetD8Async`, `D16`, `D32`), so `value`'s bytes
    /// must be one of those repeated: any value of a 1-, 2- or 4-byte type is, and so is a wider
    /// value made of one such word (`0.0f64`, `[7u8; 3]`, `u64::MAX`). Others are
    /// [`Error::FillPattern`]; [`fill_zero`](Stream::fill_zero) zeroes any zeroable type.
    ///
    /// `value`'s bytes are read on the host, so its type has no padding (`NoUninit`).
    /// Refused before anything is enqueued: a value of no such pattern, a buffer of another
    /// stream of a stream set ([`Error::StreamMismatch`]), a poisoned stream.
    pub fn fill<T: DeviceCopy + NoUninit, M: Storage>(
        &self,
        buf: &mut Managed<[T], StreamOwned<'s, K>, M>,
        value: T,
    ) -> Result<()> {
        self.check_writable_here(&[buf.stream().id])?;
        let fill = memset_of(bytemuck::bytes_of(&value), buf.len()).ok_or(Error::FillPattern {
            elem_size: size_of::<T>(),
        })?;
        self.enqueue_fill(buf, fill)
    }

    /// Enqueues a fill of `buf` with zero bytes on this stream: every element becomes zero, for
    /// any type whose all-zero value is valid (`Zeroable`). Ordered and refused as
    /// [`fill`](Stream::fill) is, and `buf` marked written.
    pub fn fill_zero<T: Zeroable, M: Storage>(
        &self,
        buf: &mut Managed<[T], StreamOwned<'s, K>, M>,
    ) -> Result<()> {
        self.check_writable_here(&[buf.stream().id])?;
        let fill = zero_fill(buf.size_in_bytes());
        self.enqueue_fill(buf, fill)
    }

    /// `Err` where work may not be enqueued on this stream with buffers of the stream ids
    /// `owners` (in argument order): a poisoned stream, or a buffer of another stream of the
    /// set.
    fn check_writable_here(&self, owners: &[u64]) -> Result<()> {
        // Work on a poisoned stream was aborted and may still touch its buffers.
        self.check_not_poisoned()?;
        // Brands already guarantee this, except between streams of one stream set.
        if let Some(argument) = owners.iter().position(|id| *id != self.raw().id) {
            return Err(Error::StreamMismatch { argument });
        }
        Ok(())
    }

    /// Enqueues `fill`, which covers `buf` exactly, on this stream, and marks `buf` written.
    fn enqueue_fill<T, M: Storage>(
        &self,
        buf: &mut Managed<[T], StreamOwned<'s, K>, M>,
        fill: Memset,
    ) -> Result<()> {
        self.context().bind()?;
        buf.mark_device_written();
        // SAFETY: `fill` writes exactly `buf.size_in_bytes()` bytes, and every element becomes a
        // valid `T`: the value's own bytes repeated in a word that divides the element's size
        // (`memset_of`), or all zero bytes for a `Zeroable` type (`zero_fill`). The address is
        // the allocation's start, aligned to 256 bytes (every storage's, checked at allocation),
        // so to the word; the buffer is owned by this stream, so nothing else uses it until the
        // stream has run the fill, and it is not freed before that (as in `copy`). The stream is
        // alive, of the current context.
        unsafe { driver::memset_async(buf.device_ptr(), fill, self.raw().handle) }
    }
}

/// The fill that writes `bytes` (one element's) into each of `len` elements: the widest word
/// (4, 2, then 1 byte) whose size divides the element's and which `bytes` repeat. `None` where
/// none does, or the total overflows.
fn memset_of(bytes: &[u8], len: usize) -> Option<Memset> {
    let size = bytes.len();
    let total = size.checked_mul(len)?;
    let repeats = |w: usize| size % w == 0 && bytes.chunks(w).all(|c| c == &bytes[..w]);
    if size == 0 {
        return None;
    }
    if repeats(4) {
        let value = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        return Some(Memset::D32 {
            value,
            count: total / 4,
        });
    }
    if repeats(2) {
        let value = u16::from_le_bytes([bytes[0], bytes[1]]);
        return Some(Memset::D16 {
            value,
            count: total / 2,
        });
    }
    repeats(1).then(|| Memset::D8 {
        value: bytes[0],
        count: total,
    })
}

/// The fill that zeroes `bytes` bytes, in the widest word that divides them.
fn zero_fill(bytes: usize) -> Memset {
    if bytes % 4 == 0 {
        Memset::D32 {
            value: 0,
            count: bytes / 4,
        }
    } else if bytes % 2 == 0 {
        Memset::D16 {
            value: 0,
            count: bytes / 2,
        }
    } else {
        Memset::D8 {
            value: 0,
            count: bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{memset_of, zero_fill};
    use crate::driver::Memset;
    use cust::memory::bytemuck::bytes_of;

    /// What the fill writes over `len` elements, as bytes, the way the device lays the words out
    /// (little-endian).
    fn written(fill: Memset) -> Vec<u8> {
        match fill {
            Memset::D8 { value, count } => vec![value; count],
            Memset::D16 { value, count } => value.to_le_bytes().repeat(count),
            Memset::D32 { value, count } => value.to_le_bytes().repeat(count),
        }
    }

    #[test]
    fn every_value_of_one_two_and_four_bytes_fills_every_element_with_itself() {
        for len in [1, 2, 3, 7, 1001] {
            for (bytes, want) in [
                (bytes_of(&0xa5u8).to_vec(), 1),
                (bytes_of(&0x1234u16).to_vec(), 2),
                (bytes_of(&-1.5f32).to_vec(), 4),
                (bytes_of(&0x0102_0304u32).to_vec(), 4),
                (bytes_of(&7i16).to_vec(), 2),
            ] {
                let fill = memset_of(&bytes, len).expect("a 1-, 2- or 4-byte value");
                let width = match fill {
                    Memset::D8 { .. } => 1,
                    Memset::D16 { .. } => 2,
                    Memset::D32 { .. } => 4,
                };
                assert!(width <= want, "{bytes:?}: width {width}");
                assert_eq!(written(fill), bytes.repeat(len), "{bytes:?} x {len}");
            }
        }
    }

    #[test]
    fn a_wider_value_fills_only_where_one_word_repeats_in_it() {
        for len in [1, 5, 64] {
            for bytes in [
                bytes_of(&0.0f64).to_vec(),
                bytes_of(&u64::MAX).to_vec(),
                bytes_of(&[7u8; 3]).to_vec(),
                bytes_of(&[0x0201u16; 3]).to_vec(),
                bytes_of(&[2.5f32; 4]).to_vec(),
            ] {
                let fill = memset_of(&bytes, len).expect("one word repeated");
                assert_eq!(written(fill), bytes.repeat(len), "{bytes:?} x {len}");
            }
            for bytes in [
                bytes_of(&1.0f64).to_vec(),
                bytes_of(&[1u8, 2, 3]).to_vec(),
                bytes_of(&[1.0f32, 2.0]).to_vec(),
                bytes_of(&0x0102_0304_0102_0305u64).to_vec(),
            ] {
                assert_eq!(memset_of(&bytes, len), None, "{bytes:?}");
            }
        }
        assert_eq!(memset_of(&[], 3), None);
        assert_eq!(memset_of(&[0; 8], usize::MAX), None, "the total overflows");
    }

    #[test]
    fn a_zero_fill_covers_every_byte_in_the_widest_word() {
        for bytes in [1, 2, 3, 4, 6, 12, 1001, 4096] {
            let fill = zero_fill(bytes);
            assert_eq!(written(fill), vec![0; bytes], "{bytes} bytes");
        }
        assert_eq!(zero_fill(12), Memset::D32 { value: 0, count: 3 });
        assert_eq!(zero_fill(6), Memset::D16 { value: 0, count: 3 });
        assert_eq!(zero_fill(3), Memset::D8 { value: 0, count: 3 });
    }
}
