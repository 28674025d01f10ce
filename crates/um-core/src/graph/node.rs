//! Kernel nodes whose scalars change between replays: [`Node`], made by the `_node` form of a
//! typed launcher inside a capture, and [`Scalars`], the tuple of its changeable values.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::{MaybeUninit, size_of};

use cust::memory::DeviceCopy;

use crate::driver;
use crate::driver::stream::{Capture, Stream};
use crate::driver::sys;
use crate::error::{Error, Result};
use crate::launch::{KernelArgs, LaunchConfig};
use crate::sealed::Private;

/// One parameter's value, as the driver reads it: bytes, in storage aligned to 16.
#[derive(Clone)]
struct Param {
    bytes: Vec<MaybeUninit<u128>>,
}

impl Param {
    /// A copy of the `size` bytes at `value`.
    ///
    /// # Safety
    /// `value` is valid for reads of `size` bytes.
    unsafe fn copy_of(value: *const c_void, size: usize) -> Param {
        let mut bytes = vec![MaybeUninit::<u128>::uninit(); size.div_ceil(16).max(1)];
        // SAFETY: `value` is readable for `size` bytes (the caller), `bytes` writable for at
        // least as many, and they do not overlap; bytes are copied as bytes (padding included),
        // never read as a typed value.
        unsafe {
            std::ptr::copy_nonoverlapping(
                value.cast::<u8>(),
                bytes.as_mut_ptr().cast::<u8>(),
                size,
            );
        }
        Param { bytes }
    }

    fn as_ptr(&mut self) -> *mut c_void {
        self.bytes.as_mut_ptr().cast()
    }
}

/// A kernel node recorded by a capture, whose scalar parameters of types `U` (a tuple) may be
/// set again for later replays with [`Graph::set`](crate::Graph::set).
///
/// Only the `_node` form of a safe typed launcher makes one (`um-build` generates one per
/// `UM_SAFE_KERNEL`): `U` is then the kernel's parameters that are neither buffers nor lengths,
/// in order, and the kernel's contract holds for every value of them. Buffers, lengths and the
/// geometry stay what the capture recorded. It carries no brand (it may leave the capture
/// closure), but remembers the capture stream it was recorded on: another graph refuses it.
pub struct Node<U> {
    captured_on: u64,
    handle: sys::CUgraphNode,
    function: sys::CUfunction,
    config: LaunchConfig,
    params: Vec<Param>,
    /// The positions of `U`'s values among the kernel's parameters.
    positions: &'static [usize],
    kernel: &'static str,
    _scalars: PhantomData<fn(U)>,
}

// SAFETY: the handles are driver tokens; the parameter bytes are owned copies. A node is only
// used through `Graph::set`, which takes the graph `&mut`.
unsafe impl<U> Send for Node<U> {}
// SAFETY: as above; `&Node` reads only.
unsafe impl<U> Sync for Node<U> {}

impl<U: Scalars> Node<U> {
    pub(crate) fn captured_on(&self) -> u64 {
        self.captured_on
    }

    pub(crate) fn handle(&self) -> sys::CUgraphNode {
        self.handle
    }

    /// Calls `f` with the node's parameters, `scalars` written at their positions.
    pub(crate) fn with_scalars<R>(
        &self,
        scalars: U,
        f: impl FnOnce(&sys::KernelNodeParams) -> Result<R>,
    ) -> Result<R> {
        let mut params = self.params.clone();
        scalars.write(
            &mut params_view(&mut params),
            self.positions,
            crate::sealed::PRIVATE,
        );
        let mut pointers: Vec<*mut c_void> = params.iter_mut().map(Param::as_ptr).collect();
        let c = self.config;
        let node = sys::KernelNodeParams {
            func: self.function,
            grid: [c.grid.0, c.grid.1, c.grid.2],
            block: [c.block.0, c.block.1, c.block.2],
            shared_mem_bytes: c.shared_mem_bytes,
            kernel_params: pointers.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        // `params` and `pointers` live until `f` returns; the driver copies the values.
        f(&node)
    }
}

impl<U> std::fmt::Debug for Node<U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("kernel", &self.kernel)
            .field("scalars", &self.positions)
            .finish_non_exhaustive()
    }
}

/// Where [`Scalars::write`] writes: the parameters' bytes. Opaque outside `um`.
#[allow(unreachable_pub)]
pub struct ParamsMut<'a> {
    params: &'a mut [Param],
}

fn params_view(params: &mut [Param]) -> ParamsMut<'_> {
    ParamsMut { params }
}

impl ParamsMut<'_> {
    /// Writes `value` over the parameter at `position` (whose size the node checked).
    fn put<T: DeviceCopy>(&mut self, position: usize, value: T) {
        if let Some(p) = self.params.get_mut(position) {
            // SAFETY: `value` is a live `T`, readable for `size_of::<T>()` bytes.
            *p = unsafe { Param::copy_of((&raw const value).cast(), size_of::<T>()) };
        }
    }
}

/// The scalar values of a [`Node`] that change between replays: a tuple (up to eight) of
/// [`DeviceCopy`] values, or `()`. Sealed.
pub trait Scalars: sealed_scalars::Sealed {
    /// The size of each value, in order.
    #[doc(hidden)]
    fn sizes() -> Vec<usize>;
    /// Writes the values at `positions`. `um`'s own (the token).
    #[doc(hidden)]
    fn write(self, params: &mut ParamsMut<'_>, positions: &[usize], _: Private);
}

macro_rules! scalars_for_tuples {
    ($( ($($t:ident $v:ident $i:tt),*) )+) => {$(
        impl<$($t: DeviceCopy),*> sealed_scalars::Sealed for ($($t,)*) {}
        impl<$($t: DeviceCopy),*> Scalars for ($($t,)*) {
            fn sizes() -> Vec<usize> {
                vec![$(size_of::<$t>()),*]
            }
            #[allow(unused_variables)]
            fn write(self, params: &mut ParamsMut<'_>, positions: &[usize], _: Private) {
                let ($($v,)*) = self;
                $( if let Some(p) = positions.get($i) { params.put(*p, $v); } )*
            }
        }
    )+};
}

/// Seals [`Scalars`]: tuples of any `DeviceCopy` types (a user's struct included), which
/// `crate::sealed::Sealed` (sealed for kernel arguments) does not cover.
mod sealed_scalars {
    /// Implemented only here.
    #[allow(unreachable_pub)]
    pub trait Sealed {}
}

scalars_for_tuples! {
    ()
    (A a 0)
    (A a 0, B b 1)
    (A a 0, B b 1, C c 2)
    (A a 0, B b 1, C c 2, D d 3)
    (A a 0, B b 1, C c 2, D d 3, E e 4)
    (A a 0, B b 1, C c 2, D d 3, E e 4, F f 5)
    (A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6)
    (A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6, H h 7)
}

impl<'c> Stream<'c, Capture> {
    /// [`Stream::launch_ptx`] on a capture stream, returning the recorded kernel node, whose
    /// parameters at `positions` (of the types of `U`, in order) [`Graph::set`] may change for
    /// later replays: what the `_node` forms of the typed launchers call.
    ///
    /// # Safety
    /// As for [`Stream::launch`]; and the kernel keeps that contract for every value of the
    /// parameters at `positions`, which are parameters of `U`'s types, in order, and neither
    /// buffers nor lengths.
    ///
    /// [`Graph::set`]: crate::Graph::set
    #[doc(hidden)]
    pub unsafe fn launch_ptx_node<A: KernelArgs<'c>, U: Scalars>(
        &self,
        ptx: &'static str,
        name: &'static str,
        config: LaunchConfig,
        args: A,
        positions: &'static [usize],
    ) -> Result<Node<U>> {
        let function = self.function(ptx, name)?;
        let stream = self.raw();
        let then = |params: &[*mut c_void], sizes: &[usize]| -> Result<Node<U>> {
            let fits = U::sizes().len() == positions.len()
                && U::sizes()
                    .iter()
                    .zip(positions)
                    .all(|(size, p)| sizes.get(*p) == Some(size));
            if !fits {
                return Err(Error::NodeScalarMismatch { kernel: name });
            }
            // SAFETY: a live capture stream of the current context.
            let Some(handle) = (unsafe { driver::stream_last_captured_node(stream.handle) })?
            else {
                return Err(driver::driver_error("cuStreamGetCaptureInfo", 901));
            };
            let params = params
                .iter()
                .zip(sizes)
                // SAFETY: each pointer points to a live value of its size (`with_params`).
                .map(|(p, size)| unsafe { Param::copy_of(*p, *size) })
                .collect();
            Ok(Node {
                captured_on: stream.id,
                handle,
                function: function.raw,
                config,
                params,
                positions,
                kernel: name,
                _scalars: PhantomData,
            })
        };
        // SAFETY: `function` belongs to this stream's context; the caller's guarantees are
        // `launch`'s.
        unsafe { self.launch_then(function, name, config, args, then) }
    }
}
