//! The constructors of [`Coherent`] memory: managed memory attached globally, on devices with
//! concurrent managed access only. What the transitions do with it is in `crate::state`; what
//! the storage is, in `crate::storage`.
//!
//! They have their own names for the reason mirrored memory's do: `Managed::from_slice` keeps
//! meaning unified memory.

use std::ptr::NonNull;
use std::sync::OnceLock;

use cust::memory::DeviceCopy;
use cust::memory::bytemuck::Zeroable;

use crate::driver;
use crate::driver::context::Context;
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::memory::managed::{Fresh, Managed, alloc_managed, byte_size};
use crate::memory::state::HostOwned;
use crate::memory::storage::Coherent;

impl Fresh<Coherent> {
    /// `bytes` (> 0) of globally attached managed memory, if the device has concurrent managed
    /// access (as `ctx` reports it: the emulated mode of `ContextOptions` reports none).
    fn alloc(ctx: &Context, bytes: usize, align: usize) -> Result<Self> {
        let info = ctx.info();
        if !info.concurrent_managed_access {
            return Err(Error::NeedsConcurrentManagedAccess {
                device: info.ordinal,
            });
        }
        if let Some(device) = device_lacking_concurrent_access()? {
            return Err(Error::NeedsConcurrentManagedAccess { device });
        }
        Ok(Fresh {
            base: alloc_managed(ctx, bytes, align, true)?,
            parts: (),
        })
    }
}

/// The first device of the process without concurrent managed access, if any.
///
/// Globally attached memory is reachable from every device, not only the allocation's
/// (`cuMemAllocManaged`: "accessible from any stream on any device"), and on a device without
/// concurrent managed access the CPU may touch no such memory while any kernel runs there. A
/// kernel on that other device (through `um` or not) would then make every CPU access to a
/// host-owned coherent buffer a fault, which the states cannot prevent: so every device must
/// have it, not only the allocation's. (The emulated mode belongs to one handle and changes
/// nothing physical: it is checked on `ctx` above, not here.)
///
/// The devices of a process are fixed once the driver is initialised, so the answer is asked
/// of the driver once and kept (an error is not kept: the next allocation asks again).
fn device_lacking_concurrent_access() -> Result<Option<usize>> {
    static ANSWER: OnceLock<Option<usize>> = OnceLock::new();
    if let Some(answer) = ANSWER.get() {
        return Ok(*answer);
    }
    let answer = first_lacking((0..driver::device_count()?).map(|ordinal| {
        let device = driver::device_get(ordinal)?;
        Ok(driver::device_attribute(device, sys::ATTR_CONCURRENT_MANAGED_ACCESS)? != 0)
    }))?;
    Ok(*ANSWER.get_or_init(|| answer))
}

/// The ordinal of the first device whose concurrent managed access is `false`, given each
/// device's answer in order; the first error stops the search.
fn first_lacking(devices: impl IntoIterator<Item = Result<bool>>) -> Result<Option<usize>> {
    for (ordinal, concurrent) in devices.into_iter().enumerate() {
        if !concurrent? {
            return Ok(Some(ordinal));
        }
    }
    Ok(None)
}

impl<T: DeviceCopy> Managed<T, HostOwned, Coherent> {
    /// A coherent allocation holding `value`.
    pub fn new_coherent(ctx: &Context, value: T) -> Result<Self> {
        let bytes = byte_size::<T>(1)?;
        Ok(Fresh::<Coherent>::alloc(ctx, bytes, std::mem::align_of::<T>())?.value(ctx, value))
    }

    /// A coherent allocation filled with zero bytes.
    pub fn zeroed_coherent(ctx: &Context) -> Result<Self>
    where
        T: Zeroable,
    {
        let bytes = byte_size::<T>(1)?;
        Ok(
            Fresh::<Coherent>::alloc(ctx, bytes, std::mem::align_of::<T>())?.zeroed(
                ctx,
                bytes,
                NonNull::cast,
            ),
        )
    }
}

impl<T: DeviceCopy> Managed<[T], HostOwned, Coherent> {
    /// A coherent allocation of `len` elements, element `i` set to `f(i)`.
    ///
    /// If `f` panics, the allocation leaks (it is never read uninitialised).
    pub fn from_fn_coherent(ctx: &Context, len: usize, f: impl FnMut(usize) -> T) -> Result<Self> {
        let bytes = byte_size::<T>(len)?;
        Ok(
            Fresh::<Coherent>::alloc(ctx, bytes, std::mem::align_of::<T>())?
                .filled(ctx, len, bytes, f),
        )
    }

    /// A coherent copy of `data`.
    ///
    /// ```no_run
    /// # fn main() -> um_core::Result<()> {
    /// use um_core::{CoherentManaged, Context, Managed, StreamOptions};
    /// let ctx = Context::new(0)?;
    /// let data: CoherentManaged<[f32]> = Managed::from_slice_coherent(&ctx, &[1.0, 2.0])?;
    /// let data = ctx.with_streams(2, StreamOptions::new(), |s| {
    ///     let data = data.attach(&s[0])?; // no driver call
    ///     // ... launches on s[0] ...
    ///     let data = data.hand_off(&s[1])?; // an event: s[1] waits for s[0] on the GPU
    ///     // ... launches on s[1] ...
    ///     data.sync()
    /// })?;
    /// assert_eq!(data[1], 2.0);
    /// # Ok(()) }
    /// ```
    pub fn from_slice_coherent(ctx: &Context, data: &[T]) -> Result<Self> {
        Self::from_fn_coherent(ctx, data.len(), |i| data[i])
    }

    /// A coherent allocation of `len` zeroed elements.
    pub fn zeroed_slice_coherent(ctx: &Context, len: usize) -> Result<Self>
    where
        T: Zeroable,
    {
        let bytes = byte_size::<T>(len)?;
        let slice = |base: NonNull<u8>| NonNull::slice_from_raw_parts(base.cast::<T>(), len);
        Ok(
            Fresh::<Coherent>::alloc(ctx, bytes, std::mem::align_of::<T>())?
                .zeroed(ctx, bytes, slice),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::first_lacking;
    use crate::error::Error;

    #[test]
    fn one_device_without_concurrent_access_refuses_coherent_memory_on_all() {
        assert_eq!(first_lacking([]), Ok(None));
        assert_eq!(first_lacking([Ok(true), Ok(true)]), Ok(None));
        assert_eq!(first_lacking([Ok(true), Ok(false), Ok(true)]), Ok(Some(1)));
        assert_eq!(first_lacking([Ok(false), Ok(false)]), Ok(Some(0)));
        let err = Error::InvalidDevice {
            ordinal: 1,
            count: 1,
        };
        assert_eq!(
            first_lacking([Ok(true), Err(err.clone()), Ok(false)]),
            Err(err)
        );
    }
}
