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
use super::{State, find};

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

impl<'a> LaunchArgs<'a> {
    /// The arguments of operation `seq` of stream `stream`, as the model's state `g` has them
    /// when its worker runs it. A parameter is an address only inside an allocation that records
    /// an access by this stream at `seq` or later: one the launch touched when it was enqueued
    /// (or a later operation of the stream, which runs after it). Such an allocation cannot be
    /// freed, and the host or another stream cannot reach it unreported, until this operation
    /// has completed. An allocation made at that address after the launch records no such
    /// access, and is no memory of the launch.
    pub(crate) fn new(g: &State, args: &'a Args, stream: usize, seq: u64) -> Self {
        let spans = args
            .0
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // Only what um's launch passed as memory: a plain value that holds an address
                // is no memory of the launch's (a host-owned buffer's, say, that the host reads
                // meanwhile).
                if p.len() != 8 || i >= 64 || args.1 & (1 << i) == 0 {
                    return None;
                }
                let address = args.u64(i) as usize;
                let start = find(g, address)?;
                let a = g.allocs.get(&start)?;
                let pending = a.accesses.get(&stream).is_some_and(|&v| v >= seq);
                pending.then_some((address, start + a.len - address))
            })
            .collect();
        LaunchArgs {
            params: &args.0,
            spans,
        }
    }
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

/// The registered twin of `name`, if any.
fn registered(name: &str) -> Option<Twin> {
    TWINS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .cloned()
}

/// Runs the kernel `name` of a launch: the registered twin of that name, else the model's own
/// ([`kernels::run`](super::kernels::run)), both on the checked [`LaunchArgs`]. Returns the
/// sticky error of a kernel that faults: a twin that panics is one, and its panic stays here
/// (the stream's worker goes on to its next operation).
pub(crate) fn run(name: &str, launch: &mut LaunchArgs<'_>) -> Option<i32> {
    let twin = registered(name);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &twin {
        Some(twin) => {
            twin(launch);
            None
        }
        None => super::kernels::run(name, launch),
    }));
    match ran {
        Ok(fault) => fault,
        Err(payload) => {
            drop_payload(payload);
            eprintln!("um model: the CPU twin of kernel `{name}` panicked: a kernel fault");
            Some(719)
        }
    }
}

/// Drops a panic's payload without unwinding: a payload whose own drop panics would otherwise
/// unwind out of the stream's worker, which then never runs the stream's later work (a wait for
/// it would hang). The payload of that second panic is leaked.
pub(crate) fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
    if let Err(again) = dropped {
        std::mem::forget(again);
    }
}
