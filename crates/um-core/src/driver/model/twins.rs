//! A user's CPU twins of their own kernels: what runs on the model in place of a kernel the model
//! does not know (`um::model::register_kernel`, docs/gpu-testing.md, "Your own tests on the
//! model").
//!
//! A twin is safe code. It sees a launch's copied parameters, and a pointer parameter only as a
//! slice the model checked: inside one allocation of the model, from the pointer to the
//! allocation's end, aligned for the element type, of a type every bit pattern of which is a
//! value (`Pod`). While the twin runs its launch is pending, so the model refuses a free of that
//! memory, reports work of another stream that touches it without an ordering edge, and reports
//! a host access before a wait; and one slice at a time borrows the arguments mutably, so two
//! parameters that point into one allocation never give two live `&mut` slices.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use cust::memory::bytemuck::{self, Pod};

use super::kernels::Args;
use super::{find, lock};

/// What a twin is: any thread may run it (each stream's worker runs its own kernels).
type Twin = Arc<dyn Fn(&mut LaunchArgs<'_>) + Send + Sync>;

static TWINS: LazyLock<Mutex<HashMap<String, Twin>>> = LazyLock::new(Default::default);

/// The arguments of one launch, as a CPU twin sees them (see [`register_kernel`]).
#[derive(Debug)]
pub struct LaunchArgs<'a> {
    params: &'a [Vec<u8>],
    /// For each parameter that is an address inside an allocation of the model: that address
    /// and the bytes from it to the allocation's end.
    spans: Vec<Option<(usize, usize)>>,
}

impl LaunchArgs<'_> {
    /// How many parameters the kernel has (as its PTX declares them).
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether the kernel has no parameters.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// Parameter `i`'s bytes, as the launch passed them; `None` past the last.
    pub fn bytes(&self, i: usize) -> Option<&[u8]> {
        self.params.get(i).map(Vec::as_slice)
    }

    /// Parameter `i` as a value of type `T` (`f32`, `u32`, a `#[repr(C)]` struct that is
    /// `Pod`); `None` unless the parameter has exactly `size_of::<T>()` bytes. A `um::len32`
    /// parameter reads as a `u32`, a `len64` as a `u64`.
    pub fn scalar<T: Pod>(&self, i: usize) -> Option<T> {
        let b = self.bytes(i)?;
        (b.len() == size_of::<T>()).then(|| bytemuck::pod_read_unaligned(b))
    }

    /// The memory parameter `i` points to, as elements of `T`: from the address to the end of
    /// its allocation (the buffer's length is usually a parameter of its own: cut the slice to
    /// it). `None` where the parameter is no address inside an allocation of the model, is not
    /// aligned for `T`, or `T` has no size.
    pub fn buffer<T: Pod>(&self, i: usize) -> Option<&[T]> {
        let (address, bytes) = self.span::<T>(i)?;
        // SAFETY: `span` checked that `address..address + bytes` lies in one live allocation of
        // the model, aligned for `T`, and `T: Pod` makes every byte pattern a value. The launch
        // is pending while the twin runs, so the model refuses the allocation's free, and no
        // other stream's work or host access reaches it unreported; `&self` keeps
        // `buffer_mut` from giving a `&mut` into it while this slice lives.
        Some(unsafe { std::slice::from_raw_parts(address as *const T, bytes / size_of::<T>()) })
    }

    /// As [`buffer`](LaunchArgs::buffer), to write: the twin's results. One slice at a time
    /// (it borrows the arguments mutably): copy an input out first (`buffer(i)?.to_vec()`)
    /// where the kernel reads one buffer and writes another.
    pub fn buffer_mut<T: Pod>(&mut self, i: usize) -> Option<&mut [T]> {
        let (address, bytes) = self.span::<T>(i)?;
        // SAFETY: as in `buffer`, and `&mut self` makes this the only slice of the launch's
        // memory alive.
        Some(unsafe { std::slice::from_raw_parts_mut(address as *mut T, bytes / size_of::<T>()) })
    }

    fn span<T>(&self, i: usize) -> Option<(usize, usize)> {
        let (address, bytes) = (*self.spans.get(i)?)?;
        let fits = size_of::<T>() > 0 && address % align_of::<T>() == 0;
        fits.then_some((address, bytes))
    }
}

/// Registers `twin` as the CPU twin of the kernel called `name` (its `extern "C"` name, as in the
/// PTX `.entry`): on the model every launch of a kernel of that name, by any module, runs `twin`
/// on the stream's worker thread, in the stream's order, instead of doing nothing. A later
/// registration of the same name replaces the earlier one; a user's twin takes precedence over
/// the model's own of the same name.
///
/// The twin should do what the kernel does, over the whole launch (it runs once, not once per
/// thread). A twin that panics is a faulting kernel: the context gets the sticky
/// `CUDA_ERROR_LAUNCH_FAILED`, as after a device-side trap.
///
/// ```
/// um_core::model::register_kernel("saxpy", |args| {
///     let (Some(a), Some(n)) = (args.scalar::<f32>(2), args.scalar::<u32>(3)) else { return };
///     let n = n as usize;
///     let Some(x) = args.buffer::<f32>(0).map(|x| x[..n].to_vec()) else { return };
///     if let Some(y) = args.buffer_mut::<f32>(1) {
///         for (y, x) in y[..n].iter_mut().zip(x) {
///             *y += a * x;
///         }
///     }
/// });
/// ```
pub fn register_kernel(name: &str, twin: impl Fn(&mut LaunchArgs<'_>) + Send + Sync + 'static) {
    TWINS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned(), Arc::new(twin));
}

/// Declares the kernel called `name` a no-op on the model: its launches do nothing, and the model
/// does not say that it has no twin. Its launches are still checked (the memory they touch, their
/// stream's order).
pub fn register_noop_kernel(name: &str) {
    register_kernel(name, |_| {});
}

/// Runs the registered twin of `name` on `args`: `None` where none is registered, else
/// `Some(fault)`, the sticky error of a twin that panicked.
pub(crate) fn run(name: &str, args: &Args) -> Option<Option<i32>> {
    let twin = TWINS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .cloned()?;
    let spans = {
        let g = lock();
        args.0
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if p.len() != 8 {
                    return None;
                }
                let address = args.u64(i) as usize;
                let start = find(&g, address)?;
                let len = g.allocs.get(&start)?.len;
                Some((address, start + len - address))
            })
            .collect()
    };
    let mut launch = LaunchArgs {
        params: &args.0,
        spans,
    };
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| twin(&mut launch)));
    Some(ran.err().map(|_| {
        eprintln!("um model: the CPU twin of kernel `{name}` panicked: a kernel fault");
        719
    }))
}
