//! Launching kernels, with arguments whose stream the compiler checks.
//!
//! A launch on `Stream<'s, K>` takes a tuple of [`KernelArg<'s>`]: `&Managed<_, StreamOwned<'s,
//! _>>` for memory the kernel reads, `&mut Managed<_, StreamOwned<'s, _>>` for memory it
//! writes, and plain scalars. Memory attached to another stream carries another brand and does
//! not type-check; host-owned memory is not a `KernelArg` at all. The borrow checker then gives
//! the kernel the same aliasing rules as Rust code: one writer or many readers per buffer.
//! Every storage (unified, coherent or mirrored) is an argument; a `&mut` argument marks a mirror
//! written on the device, so that its `sync` copies it back.

use std::ffi::c_void;

use cust::memory::DeviceCopy;

use crate::driver::module::{Function, Kernel};
use crate::driver::stream::{Stream, StreamKind};
use crate::driver::{self, sys};
use crate::error::{Error, Result};
use crate::memory::managed::Managed;
use crate::memory::marker::StreamOwned;
use crate::memory::raw::DevicePtr;
use crate::memory::storage::Storage;
use crate::sealed::{PRIVATE, Private, Sealed};

#[doc(hidden)]
pub mod codegen;
pub(crate) mod geometry;

/// Grid, block and dynamic shared memory of a launch: the driver's raw launch shape
/// (`cuLaunchKernel`'s arguments), for `unsafe` launches ([`Stream::launch`] and `unsafe`
/// launchers).
///
/// Safe launchers take [`Linear`](crate::Linear) instead: the checked one-dimensional shape,
/// which has no y or z, no dynamic shared memory, and only values under which every thread's
/// global index is distinct. A `Linear` converts into a `LaunchConfig` (`From`), never the
/// other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid, `(x, y, z)`.
    pub grid: (u32, u32, u32),
    /// Threads per block, `(x, y, z)`.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A one-dimensional launch of `blocks` blocks of `threads_per_block` threads, with no
    /// dynamic shared memory. Unchecked: a zero, or a block larger than the kernel allows, is
    /// refused at launch ([`Error::EmptyLaunch`](crate::Error::EmptyLaunch),
    /// [`Error::BlockTooLarge`](crate::Error::BlockTooLarge)); [`Linear::new`](crate::Linear::new)
    /// checks more, when it makes a safe launcher's shape.
    pub fn grid_1d(blocks: u32, threads_per_block: u32) -> Self {
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads_per_block, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// One kernel argument valid on the stream branded `'s`. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel argument on this stream",
    label = "not memory owned by the launch stream, nor a scalar",
    note = "kernels take `&Managed<_, StreamOwned<'s>>` (read) or `&mut Managed<_, StreamOwned<'s>>` (write) of the launch stream, plain integers and floats, or `ByValue(x)`",
    note = "host-owned memory must be attached first: `let buf = buf.attach(stream)?;`"
)]
pub trait KernelArg<'s>: Sealed {
    /// The value passed to the kernel.
    #[doc(hidden)]
    type Raw: Copy;
    /// The value; for a `&mut` buffer, also marks a mirror written. `um`'s own (the token).
    #[doc(hidden)]
    fn raw(&self, _: Private) -> Self::Raw;
    /// The id of the stream owning the buffer (`None` for a scalar).
    #[doc(hidden)]
    fn owner(&self, _: Private) -> Option<u64> {
        None
    }
    /// Whether the value is the address of memory the kernel is given (a buffer, or a
    /// [`DevicePtr`] an `unsafe` launch vouches for), not a plain value: what the CPU model
    /// hands a twin as a slice, and only that.
    #[doc(hidden)]
    fn is_memory(&self, _: Private) -> bool {
        self.owner(PRIVATE).is_some()
    }
}

/// A tuple of [`KernelArg<'s>`] (up to twelve), or `()` for none. Sealed.
pub trait KernelArgs<'s>: Sealed {
    /// The position of the first buffer not owned by stream `id`, if any.
    #[doc(hidden)]
    fn foreign_buffer(&self, id: u64, _: Private) -> Option<usize>;
    /// Calls `f` with a pointer to each argument's value, and each value's size in bytes. `um`'s
    /// own (the token).
    #[doc(hidden)]
    fn with_params<R>(self, f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R, _: Private) -> R;
    /// Bit `i` set where argument `i` is memory ([`KernelArg::is_memory`]).
    #[doc(hidden)]
    fn memory_mask(&self, _: Private) -> u64;
}

/// A value of any [`DeviceCopy`] type, passed to the kernel by value (a `struct` parameter,
/// say). Plain integers and floats need no wrapper.
#[derive(Debug, Clone, Copy)]
pub struct ByValue<T: DeviceCopy>(pub T);

impl<T: DeviceCopy> Sealed for ByValue<T> {}
impl<'s, T: DeviceCopy> KernelArg<'s> for ByValue<T> {
    type Raw = T;
    fn raw(&self, _: Private) -> T {
        self.0
    }
}

impl<T: ?Sized, K: StreamKind, M: Storage> Sealed for &Managed<T, StreamOwned<'_, K>, M> {}
impl<'s, T: ?Sized, K: StreamKind, M: Storage> KernelArg<'s>
    for &Managed<T, StreamOwned<'s, K>, M>
{
    type Raw = sys::CUdeviceptr;
    fn raw(&self, _: Private) -> sys::CUdeviceptr {
        self.device_ptr()
    }
    fn owner(&self, _: Private) -> Option<u64> {
        Some(self.stream().id)
    }
}

impl<T: ?Sized, K: StreamKind, M: Storage> Sealed for &mut Managed<T, StreamOwned<'_, K>, M> {}
impl<'s, T: ?Sized, K: StreamKind, M: Storage> KernelArg<'s>
    for &mut Managed<T, StreamOwned<'s, K>, M>
{
    type Raw = sys::CUdeviceptr;
    /// Called once per launch, just before it: the kernel may write, so a mirror's `sync`
    /// must copy the device half back.
    fn raw(&self, _: Private) -> sys::CUdeviceptr {
        self.mark_device_written();
        self.device_ptr()
    }
    fn owner(&self, _: Private) -> Option<u64> {
        Some(self.stream().id)
    }
}

impl<T> Sealed for DevicePtr<'_, T> {}
/// A raw device address (of a stream-owned buffer, for the borrow's life), passed as the
/// kernel's pointer parameter. Only an `unsafe` launch takes it: the caller vouches that the
/// stream orders the kernel after the buffer's own stream.
impl<'s, T> KernelArg<'s> for DevicePtr<'_, T> {
    type Raw = sys::CUdeviceptr;
    fn raw(&self, _: Private) -> sys::CUdeviceptr {
        self.address()
    }
    fn is_memory(&self, _: Private) -> bool {
        true
    }
}

macro_rules! scalar_args {
    ($($t:ty)*) => {$(
        impl Sealed for $t {}
        impl<'s> KernelArg<'s> for $t {
            type Raw = $t;
            fn raw(&self, _: Private) -> $t {
                *self
            }
        }
    )*};
}
scalar_args!(i8 i16 i32 i64 u8 u16 u32 u64 f32 f64);

/// The number of identifiers given, as a constant expression.
macro_rules! count {
    () => { 0 };
    ($head:ident $($rest:ident)*) => { 1 + count!($($rest)*) };
}

macro_rules! tuple_args {
    ($( ($($t:ident $v:ident),*) )+) => {$(
        impl<$($t: Sealed),*> Sealed for ($($t,)*) {}
        impl<'s, $($t: KernelArg<'s>),*> KernelArgs<'s> for ($($t,)*) {
            #[allow(unused_variables)]
            fn foreign_buffer(&self, id: u64, _: Private) -> Option<usize> {
                let ($($v,)*) = self;
                let owners: [Option<u64>; count!($($t)*)] = [$($v.owner(PRIVATE)),*];
                owners.iter().position(|owner| owner.is_some_and(|o| o != id))
            }

            #[allow(unused_variables, unused_mut)]
            fn memory_mask(&self, _: Private) -> u64 {
                let ($($v,)*) = self;
                let memory: [bool; count!($($t)*)] = [$($v.is_memory(PRIVATE)),*];
                memory.iter().enumerate().fold(0, |m, (i, &b)| m | (u64::from(b) << i))
            }

            #[allow(unused_mut, clippy::unused_unit)]
            fn with_params<R>(
                self,
                f: impl FnOnce(&mut [*mut c_void], &[usize]) -> R,
                _: Private,
            ) -> R {
                let ($($v,)*) = self;
                // Each raw value lives in a local until `f` returns: the pointers stay valid
                // for the launch call, which copies the values.
                $( let $v = $v.raw(PRIVATE); )*
                let mut params: [*mut c_void; count!($($t)*)] =
                    [$( (&raw const $v).cast_mut().cast::<c_void>() ),*];
                let sizes: [usize; count!($($t)*)] = [$( std::mem::size_of_val(&$v) ),*];
                f(&mut params, &sizes)
            }
        }
    )+};
}

tuple_args! {
    ()
    (A a)
    (A a, B b)
    (A a, B b, C c)
    (A a, B b, C c, D d)
    (A a, B b, C c, D d, E e)
    (A a, B b, C c, D d, E e, F f)
    (A a, B b, C c, D d, E e, F f, G g)
    (A a, B b, C c, D d, E e, F f, G g, H h)
    (A a, B b, C c, D d, E e, F f, G g, H h, I i)
    (A a, B b, C c, D d, E e, F f, G g, H h, I i, J j)
    (A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, L l)
    (A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, L l, M m)
}

impl<'s, K: StreamKind> Stream<'s, K> {
    /// Enqueues `kernel` on this stream with `args`.
    ///
    /// The compiler checks that every buffer in `args` is owned by this stream, and that no
    /// buffer is both read and written. It cannot read the PTX, hence `unsafe`.
    ///
    /// # Safety
    /// * `args` matches the kernel's parameter list in number, order, size and type, with
    ///   `&mut Managed` exactly where the kernel may write through the pointer;
    /// * the kernel stays inside the bounds of every buffer for the launch configuration given;
    /// * the kernel touches no memory other than what `args` hands it;
    /// * on a capture stream (the launch is recorded into a graph), the kernel's module stays
    ///   loaded for as long as the graph exists: a `Kernel` of this stream's `Context` handle
    ///   always does (the graph holds that handle), one of another handle only while that handle
    ///   (or a clone of the `Kernel`) is kept until the graph is dropped.
    ///
    /// The typed launchers of `um-kernels` discharge these conditions for the kernels they wrap.
    pub unsafe fn launch<A: KernelArgs<'s>>(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: A,
    ) -> Result<()> {
        if !kernel.context().same_as(self.context()) {
            return Err(Error::ContextMismatch);
        }
        // SAFETY: the caller's guarantees are this function's.
        unsafe { self.launch_function(kernel.function(), kernel.name(), config, args) }
    }

    /// [`Stream::launch`] of the kernel `name` of the PTX module `ptx`, found through a
    /// per-thread cache (no lock, no reference count once found): what the typed launchers of
    /// `um-kernels` call.
    ///
    /// # Safety
    /// As for [`Stream::launch`].
    pub unsafe fn launch_ptx<A: KernelArgs<'s>>(
        &self,
        ptx: &'static str,
        name: &'static str,
        config: LaunchConfig,
        args: A,
    ) -> Result<()> {
        let function = self.function(ptx, name)?;
        // SAFETY: `function` belongs to this stream's context, which the stream keeps alive;
        // the caller's guarantees are this function's.
        unsafe { self.launch_function(function, name, config, args) }
    }

    /// The kernel `name` of module `ptx` in this stream's context, from this thread's cache.
    /// On a capture stream, a first use loads the module with the thread's capture mode relaxed:
    /// loading a module in thread-local mode invalidates the capture (seen on driver 580), and
    /// loading enqueues nothing that the graph would need.
    pub(crate) fn function(&self, ptx: &'static str, name: &'static str) -> Result<Function> {
        if K::CAPTURING {
            let _relaxed = driver::RelaxedCapture::enter()?;
            return self.context().function_cached(ptx, name);
        }
        self.context().function_cached(ptx, name)
    }

    /// # Safety
    /// `function` is a function of this stream's context; otherwise as for [`Stream::launch`].
    unsafe fn launch_function<A: KernelArgs<'s>>(
        &self,
        function: Function,
        name: &str,
        config: LaunchConfig,
        args: A,
    ) -> Result<()> {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { self.launch_then(function, name, config, args, |_, _| Ok(())) }
    }

    /// Launches as [`Stream::launch`] does, then calls `then` with the parameters passed (a
    /// pointer to each value, and its size), while they are still alive: for a capture, which
    /// keeps them with the recorded node.
    ///
    /// # Safety
    /// As for `launch_function`.
    pub(crate) unsafe fn launch_then<A: KernelArgs<'s>, R>(
        &self,
        function: Function,
        name: &str,
        config: LaunchConfig,
        args: A,
        then: impl FnOnce(&[*mut c_void], &[usize]) -> Result<R>,
    ) -> Result<R> {
        // Work on a poisoned stream was aborted and may still touch its buffers.
        self.check_not_poisoned()?;
        // Brands already guarantee this, except between streams of one stream set.
        if let Some(argument) = args.foreign_buffer(self.raw().id, PRIVATE) {
            return Err(Error::StreamMismatch { argument });
        }
        let (g, b) = (config.grid, config.block);
        if [g.0, g.1, g.2, b.0, b.1, b.2].contains(&0) {
            return Err(Error::EmptyLaunch { grid: g, block: b });
        }
        let threads = u64::from(b.0) * u64::from(b.1) * u64::from(b.2);
        if threads > u64::from(function.max_threads) {
            return Err(Error::BlockTooLarge {
                kernel: name.to_owned(),
                threads,
                max: function.max_threads,
            });
        }
        self.context().bind()?;
        // The CPU model hands a twin as slices only the arguments that are memory.
        #[cfg(feature = "model")]
        driver::model::set_launch_memory(args.memory_mask(PRIVATE));
        args.with_params(
            |params, sizes| {
                // SAFETY: the caller guarantees that `params` matches the kernel and that the
                // kernel's accesses are in bounds; the buffers are owned by this stream (brand
                // 's), so nothing else uses them while the kernel runs, and they cannot be freed
                // before the stream has finished with them (see `Managed`'s drop). On a capture
                // stream the launch is recorded, and the graph that replays it holds them.
                unsafe {
                    driver::launch_kernel(
                        function.raw,
                        g,
                        b,
                        config.shared_mem_bytes,
                        self.raw().handle,
                        params,
                    )
                }?;
                then(params, sizes)
            },
            PRIVATE,
        )
    }
}
