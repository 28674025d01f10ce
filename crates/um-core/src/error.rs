//! One error type for everything `um` reports at run time.

/// What went wrong. Driver failures name the call and the CUDA error; the other variants are
/// checks `um` makes before calling the driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `cuInit` found no GPU. On a machine without one this is the expected answer.
    #[error("no CUDA-capable device is detected ({call} returned {name})")]
    NoDevice {
        /// The driver call that reported it.
        call: &'static str,
        /// The CUDA error name (`CUDA_ERROR_NO_DEVICE` or `CUDA_ERROR_STUB_LIBRARY`, say).
        name: String,
    },
    /// A device ordinal past the last device.
    #[error("device {ordinal} does not exist: this machine has {count} CUDA device(s)")]
    InvalidDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// The device cannot allocate managed memory at all.
    #[error("device {ordinal} ({name}) does not support managed memory")]
    ManagedMemoryUnsupported {
        /// The device's ordinal.
        ordinal: usize,
        /// The device's name.
        name: String,
    },
    /// A driver call failed.
    #[error("{call} failed: {name} ({description})")]
    Driver {
        /// The driver entry point, for example `cuStreamAttachMemAsync`.
        call: &'static str,
        /// The raw `CUresult`.
        code: i32,
        /// The CUDA error name, for example `CUDA_ERROR_INVALID_VALUE`.
        name: String,
        /// The driver's description of the error.
        description: String,
    },
    /// The driver refused the PTX because it is newer than the driver understands.
    #[error(
        "the driver (CUDA {driver_major}.{driver_minor}) cannot load PTX ISA {ptx_isa}: \
         build the kernels with an nvcc no newer than the driver (see docs/building.md)"
    )]
    PtxUnsupported {
        /// The `.version` line of the PTX, for example `9.0`.
        ptx_isa: String,
        /// Major CUDA version the driver implements.
        driver_major: i32,
        /// Minor CUDA version the driver implements.
        driver_minor: i32,
    },
    /// A managed allocation of no bytes: the driver refuses it, and `um` says so first.
    #[error(
        "a managed allocation must hold at least one byte (asked for {len} element(s) of {elem_size} byte(s))"
    )]
    ZeroSized {
        /// Elements asked for.
        len: usize,
        /// Size of one element.
        elem_size: usize,
    },
    /// `len * size_of::<T>()` does not fit in `usize`.
    #[error("{len} elements of {elem_size} bytes overflow the address space")]
    SizeOverflow {
        /// Elements asked for.
        len: usize,
        /// Size of one element.
        elem_size: usize,
    },
    /// The element type needs a larger alignment than every allocation of every storage is
    /// guaranteed to have ([`Managed::MAX_ALIGN`](crate::Managed::MAX_ALIGN), 256 bytes: the
    /// driver's guarantee for `cuMemAlloc` and `cuMemAllocManaged`). Refused before anything is
    /// allocated, so that no `&T` is ever misaligned. Also returned, after freeing it, if an
    /// allocation ever comes back less aligned than that.
    #[error(
        "an element type aligned to {align} bytes cannot be allocated: um's allocations are aligned to {max} bytes"
    )]
    OverAligned {
        /// `align_of::<T>()`, or the alignment the driver's address turned out to have.
        align: usize,
        /// [`Managed::MAX_ALIGN`](crate::Managed::MAX_ALIGN).
        max: usize,
    },
    /// The allocation is larger than the GPU's free memory. Oversubscribing managed memory can
    /// hang a shared GPU, so `um` refuses before asking the driver.
    #[error("refusing a managed allocation of {bytes} bytes: the GPU has {free} bytes free")]
    WouldOversubscribe {
        /// Bytes asked for.
        bytes: usize,
        /// Bytes the driver reports free.
        free: usize,
    },
    /// A kernel of one context launched on a stream of another.
    #[error("the kernel was loaded in another context than the stream's")]
    ContextMismatch,
    /// `hand_off` to a stream of another device, where a device involved lacks concurrent
    /// managed access: there a GPU may only touch managed memory through its own streams'
    /// associations, and a cross-device handoff would let two devices share it.
    #[error(
        "managed memory cannot be handed from a stream of device {from} to a stream of device {to}: \
         device {lacking} lacks concurrent managed access (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 0); \
         bring it back to the host with `sync` and use memory allocated on device {to}"
    )]
    HandOffAcrossDevices {
        /// Ordinal of the device of the stream that owns the memory.
        from: usize,
        /// Ordinal of the device of the receiving stream.
        to: usize,
        /// The device without concurrent managed access (the allocation's, the owner's or the
        /// receiver's).
        lacking: usize,
    },
    /// A [`Coherent`](crate::Coherent) allocation on a device without concurrent managed access:
    /// there the CPU may not touch globally attached memory while any kernel runs, which the
    /// per-stream states cannot promise.
    #[error(
        "coherent memory needs concurrent managed access, which device {device} lacks \
         (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 0): use unified memory \
         (`Managed::from_slice` and its siblings), whose transitions move the stream association"
    )]
    NeedsConcurrentManagedAccess {
        /// Ordinal of the device: the allocation's, or another device of the process (globally
        /// attached memory is reachable from every device, so every one must have it).
        device: usize,
    },
    /// A buffer of a stream set (`Context::with_stream_set`) was used on another stream of the set.
    /// Streams of one set share a brand, so this is checked at run time.
    #[error("argument {argument} is owned by another stream of the set than the one used")]
    StreamMismatch {
        /// Position of the buffer among the launch arguments or the synced group.
        argument: usize,
    },
    /// A launch with a zero dimension in its grid or block.
    #[error("launch configuration has an empty grid or block: grid {grid:?}, block {block:?}")]
    EmptyLaunch {
        /// The grid asked for.
        grid: (u32, u32, u32),
        /// The block asked for.
        block: (u32, u32, u32),
    },
    /// A time span that cannot be read: its marks belong to two contexts, its end was marked
    /// before its start ([`TimeMark::until`](crate::TimeMark::until)), or its end completed
    /// before its start on the device (streams the program did not order; found by the wait or
    /// query that reads it).
    #[error("invalid time span: {reason}")]
    TimeSpan {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A copy between buffers of different lengths ([`Stream::copy`](crate::Stream::copy)):
    /// refused before anything is enqueued.
    #[error(
        "a copy moves a whole buffer into one of the same length: the source has {src} elements, \
         the destination {dst}"
    )]
    CopyLengths {
        /// Elements in the source.
        src: usize,
        /// Elements in the destination.
        dst: usize,
    },
    /// A fill ([`Stream::fill`](crate::Stream::fill)) with a value that is not one byte, 16-bit
    /// or 32-bit word repeated, which is all the driver's fills write: refused before anything
    /// is enqueued.
    #[error(
        "a fill repeats one byte, 16-bit or 32-bit word, and this value of {elem_size} bytes is \
         none repeated: fill_zero fills any zeroable type; write other values with a kernel"
    )]
    FillPattern {
        /// `size_of` the element type.
        elem_size: usize,
    },
    /// A handle given to [`Context::with_foreign_stream`](crate::Context::with_foreign_stream)
    /// that cannot be one: a special handle, a stream of another context, or a stream that is
    /// being captured into a graph.
    #[error("not a foreign stream of this context: {reason}")]
    InvalidForeignStream {
        /// Why.
        reason: &'static str,
    },
    /// The launch's block has more threads than the kernel allows: its `__launch_bounds__`, its
    /// registers, or the device's limit (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`). Checked
    /// before the launch (the driver would refuse it too).
    #[error(
        "kernel {kernel}: a block of {threads} threads, but the kernel allows at most {max} (its __launch_bounds__, registers or the device's limit)"
    )]
    BlockTooLarge {
        /// The kernel.
        kernel: String,
        /// Threads per block asked for.
        threads: u64,
        /// The most the kernel allows.
        max: u32,
    },
    /// The buffers of a typed launch differ in length; its kernel uses one count for all.
    #[error("kernel {kernel}: buffer `{buffer}` has {len} elements, `{first}` has {expected}")]
    LengthMismatch {
        /// The kernel.
        kernel: &'static str,
        /// The first buffer, whose length sets the count.
        first: &'static str,
        /// Its length.
        expected: usize,
        /// The buffer that differs.
        buffer: &'static str,
        /// Its length.
        len: usize,
    },
    /// A copy between a device-only buffer ([`Device`](crate::Device)) and host memory of
    /// another length: refused before any driver call.
    #[error("{what}: the buffer has {buffer} elements, the host side {host}")]
    HostCopyLength {
        /// The copy (`copy_from_host`, `copy_to_host`).
        what: &'static str,
        /// The buffer's length.
        buffer: usize,
        /// The host slice's length.
        host: usize,
    },
    /// The device has no stream-ordered allocator (`CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`
    /// is 0), so no [`MemPool`](crate::MemPool) can be made on it.
    #[error("device {device} has no memory pools (the stream-ordered allocator)")]
    MemoryPoolsUnsupported {
        /// The device's ordinal.
        device: usize,
    },
    /// A buffer is longer than the kernel's count parameter can express.
    #[error("kernel {kernel}: {len} elements do not fit its `{param}` count parameter")]
    LengthTooLarge {
        /// The kernel.
        kernel: &'static str,
        /// The count parameter's C type.
        param: &'static str,
        /// The length that does not fit.
        len: usize,
    },
    /// A [`Linear`](crate::Linear) launch that is empty, has blocks larger than any device
    /// runs, or has so many threads that a global index would wrap.
    #[error(
        "invalid launch geometry: {blocks} block(s) of {threads_per_block} thread(s): {reason}"
    )]
    InvalidGeometry {
        /// Blocks asked for.
        blocks: u32,
        /// Threads per block asked for.
        threads_per_block: u32,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A buffer so long that the kernel's grid-stride loop would wrap its index past the
    /// count type's maximum with this many threads (`len - 1 + threads > max`): the wrapped
    /// index would revisit elements that other threads own.
    #[error(
        "kernel {kernel}: {len} elements counted by `{param}` and a grid of {threads} threads \
         overflow the count type (max {max}): launch fewer threads"
    )]
    IndexOverflow {
        /// The kernel.
        kernel: &'static str,
        /// The count parameter.
        param: &'static str,
        /// The buffers' length.
        len: usize,
        /// Threads in the launch.
        threads: u64,
        /// The count type's maximum.
        max: u64,
    },
    /// Unified memory in a graph on a device without concurrent managed access: a graph runs its
    /// parallel branches on streams the driver makes, and there memory attached to one stream is
    /// the GPU's only through that stream. Refused before the capture begins.
    #[error(
        "unified memory cannot be recorded into a graph on device {device}, which lacks concurrent \
         managed access (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 0): use mirrored memory \
         (`Managed::from_slice_mirrored` and its siblings)"
    )]
    GraphNeedsConcurrentManagedAccess {
        /// Ordinal of the buffer's device.
        device: usize,
    },
    /// A capture was asked to begin where it could wait for itself: inside the closure of
    /// [`Context::with_idle_unless_capturing`](crate::Context::with_idle_unless_capturing) for
    /// the same device (a capture waits for those closures to return), inside such a closure of
    /// another device while closures of the capture's device are open (two threads doing that
    /// crosswise would wait for each other), inside um's stream callback (a waker, where no
    /// CUDA call is allowed), or on um's event thread (it runs wakers that such a closure may
    /// wait for); or in a destructor that runs while the thread exits, once um's record of the
    /// thread's captures is gone.
    #[error(
        "a capture cannot begin here: inside a Context::with_idle_unless_capturing closure of its \
         device, inside one of another device while closures of its device are open, inside a \
         driver callback, on um's event thread (it could wait for a thread that waits for it), \
         or in a thread-local destructor once um's own thread-locals are gone"
    )]
    CaptureRefusedHere,
    /// A buffer of a capture's set did not come back from the capture closure (it was dropped
    /// inside it, or a `Vec` came back shorter): a graph that may use it cannot be made. The
    /// capture is discarded; the buffer is freed once its stream is done with it.
    #[error(
        "the capture closure dropped {lost} buffer(s) of its set: every buffer must come back, \
         because the graph may use it"
    )]
    CaptureLostBuffer {
        /// How many buffers were dropped (or are missing from a `Vec`).
        lost: usize,
    },
    /// The scalars a `_node` launcher names do not match the kernel's parameters (a bug of the
    /// generated launcher, checked before the node exists).
    #[error("kernel {kernel}: the node's scalar types do not match its parameters")]
    NodeScalarMismatch {
        /// The kernel.
        kernel: &'static str,
    },
    /// A [`Node`](crate::Node) given to a graph that it was not captured into.
    #[error("the node was captured into another graph")]
    NodeOfAnotherGraph,
    /// A graph whose buffers were lost (a [`Graph::host`](crate::Graph::host) whose wait or
    /// attach failed, or whose closure panicked): it cannot be launched any more.
    #[error("the graph lost its buffers (a host access failed or panicked): it cannot be launched")]
    GraphEmptied,
    /// An environment variable that `um` reads has a value it does not understand.
    #[error("{variable}={value:?} is not understood: use 1 (on) or 0 (off)")]
    InvalidEnvironment {
        /// The variable, for example `UM_EMULATE_NO_CONCURRENT_ACCESS`.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// A library that a wrapper of `um`'s (`um-cublas`, say) loads at run time could not be
    /// loaded: the wrapper's own "not found" error, carried through `?` inside the closures of
    /// [`Context::with_stream`](crate::Context::with_stream) and its siblings as
    /// [`Error::Library`] carries its other errors. Its message lists what was tried and says
    /// what to install.
    #[error("{library}: {message}")]
    LibraryNotFound {
        /// The wrapper, for example `um-cublas`.
        library: &'static str,
        /// Its error, as it displays it.
        message: String,
    },
    /// A library that works on `um`'s buffers (`um-cublas`, say) refused or failed a call.
    /// Such a library has an error type of its own, with every detail; this variant carries
    /// its message, so that its calls can use `?` inside the closures of
    /// [`Context::with_stream`](crate::Context::with_stream) and its siblings, whose result is
    /// this type.
    #[error("{library}: {message}")]
    Library {
        /// The library, for example `um-cublas`.
        library: &'static str,
        /// Its error, as it displays it.
        message: String,
    },
    /// The stream is poisoned: work a library enqueued on it was aborted half-done (an NCCL
    /// communicator was aborted after a timeout, an error or a dead peer), so memory the stream
    /// owns may still be touched by that work. The memory is leaked, never freed or given to the
    /// CPU, and no new work goes on the stream. See [`Poisoner`](crate::Poisoner).
    #[error(
        "the stream is poisoned: work on it was aborted (an NCCL communicator was aborted), so its \
         memory is leaked rather than freed or given to the CPU, and no new work goes on it"
    )]
    StreamPoisoned,
    /// An NCCL call failed.
    #[error("{call} failed: {name} ({detail})")]
    Nccl {
        /// The NCCL entry point, for example `ncclAllReduce`.
        call: &'static str,
        /// The raw `ncclResult_t`.
        code: i32,
        /// NCCL's name of the result, for example `ncclRemoteError`.
        name: String,
        /// What NCCL said (`ncclGetErrorString`, `ncclGetLastError`).
        detail: String,
    },
    /// The NCCL library could not be loaded (it is loaded at run time: building needs nothing).
    #[error("NCCL is not available: {reason}")]
    NcclUnavailable {
        /// What was tried, what failed, and what to install.
        reason: String,
    },
    /// A collective's buffers do not have the sizes it needs; nothing was enqueued.
    #[error("{collective}: {detail}")]
    CollectiveSize {
        /// The collective, for example `all_gather`.
        collective: &'static str,
        /// The sizes found and the rule they break.
        detail: String,
    },
    /// A rank given to a collective (a root, a peer) is not a rank of the communicator, or is
    /// the calling rank where that cannot work; nothing was enqueued.
    #[error(
        "{collective}: {what} {rank} {reason} (the communicator has ranks 0..{world_size}, this is rank {own})"
    )]
    InvalidRank {
        /// The collective, for example `send`.
        collective: &'static str,
        /// What the rank is: `root` or `peer`.
        what: &'static str,
        /// The rank given.
        rank: usize,
        /// Ranks in the communicator.
        world_size: usize,
        /// The calling rank.
        own: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Unified memory given to NCCL on a device without concurrent managed access: it is
    /// associated with one stream, and NCCL may touch its buffers from streams of its own.
    #[error(
        "unified memory cannot be an NCCL buffer on device {device}, which lacks concurrent managed \
         access (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 0): use mirrored memory \
         (`Managed::from_slice_mirrored` and its siblings), whose device half any stream may use"
    )]
    CollectiveStorage {
        /// The communicator's device.
        device: usize,
    },
    /// A group of NCCL calls that NCCL would refuse as a whole (communicators of both the
    /// blocking and the nonblocking kind); nothing was enqueued.
    #[error("invalid group of NCCL calls: {reason}")]
    InvalidGroup {
        /// Why.
        reason: &'static str,
    },
    /// A communicator was given a stream of another device than its own.
    #[error("the stream belongs to device {stream}, the communicator to device {communicator}")]
    WrongDevice {
        /// Ordinal of the stream's device.
        stream: usize,
        /// Ordinal of the communicator's device.
        communicator: usize,
    },
    /// Two ranks of one communicator in this process called collectives that do not match
    /// (NCCL requires the same sequence, sizes, types, operations and roots on every rank): the
    /// later call is refused before anything is enqueued.
    #[error("rank {rank}'s {what} does not match rank {other}'s: {detail}")]
    CollectiveMismatch {
        /// The rank whose call was refused.
        rank: usize,
        /// The rank that called first.
        other: usize,
        /// Which call, for example `collective #7`.
        what: String,
        /// The two calls.
        detail: String,
    },
    /// The communicator was aborted earlier (after a timeout, an NCCL error or a dead peer);
    /// it cannot be used any more.
    #[error("the communicator was aborted: {reason}")]
    CommunicatorAborted {
        /// Why it was aborted.
        reason: String,
    },
    /// A wait did not finish within its time limit.
    #[error("{what} did not finish within {after_ms} ms")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The limit, in milliseconds.
        after_ms: u64,
    },
    /// Setting up communicators failed before NCCL was called: the environment (`RANK`,
    /// `WORLD_SIZE`, ...), the exchange of the unique id over TCP, or the devices given.
    #[error("bootstrap: {reason}")]
    Bootstrap {
        /// What failed.
        reason: String,
    },
    /// Called from a destructor that runs while the calling thread exits, after the thread-local
    /// storage that `what` needs was destroyed: a `thread_local!` value of the user's that
    /// opens um's per-thread default stream in its `Drop`, for one.
    /// Use a stream of its own ([`Context::with_stream`](crate::Context::with_stream)) there.
    #[error(
        "{what} is not available here: the thread is exiting and its thread-local storage is \
         being destroyed (a thread_local! destructor); use a stream of its own"
    )]
    ThreadExiting {
        /// What was asked for.
        what: &'static str,
    },
    /// Called from code that runs inside one of um's stream callbacks (a user's waker, woken by
    /// a stream reaching a point): CUDA allows no API call there, and a call that waited for
    /// the device would wait for the callback itself. `um` refuses before any driver call or
    /// lock. Wake a task there, and do the work in the task.
    #[error(
        "{what} is not available inside a stream callback (a waker run by um): CUDA allows no \
         API call there; do the work in the woken task"
    )]
    InsideDriverCallback {
        /// What was asked for.
        what: &'static str,
    },
    /// A wait asked for on a thread that captures: inside the closure of
    /// [`Stream::capture`](crate::Stream::capture) (or of `capture_streams`), or in what runs
    /// there. The driver refuses waits and stream queries on a capturing thread, and the refusal
    /// invalidates the capture; a refused query says nothing about the stream. `um` and its
    /// libraries refuse first ([`refuse_inside_capture`](crate::refuse_inside_capture)), before
    /// any driver or library call, and change nothing: no communicator is aborted, no stream
    /// poisoned. Returned from the closure, it fails the capture. Wait once the capture has
    /// ended.
    #[error(
        "{what} is not available inside a capture closure (on the capturing thread): the driver \
         refuses waits there; wait once the capture has ended"
    )]
    InsideCapture {
        /// What was asked for.
        what: &'static str,
    },
    /// A name passed to the driver contains a NUL byte.
    #[error("{what} contains a NUL byte")]
    InteriorNul {
        /// What the name was (a kernel name, a PTX image).
        what: &'static str,
    },
}

/// The coarse kind of an [`Error`] ([`Error::kind`]): what a caller does about it, for a
/// `match` that handles the common cases and passes the rest on.
///
/// ```
/// use um_core::{Error, ErrorKind};
///
/// fn advice(e: &Error) -> &'static str {
///     match e.kind() {
///         ErrorKind::Device => "no usable GPU here: skip the GPU work",
///         ErrorKind::LibraryMissing => "install the library the message names",
///         ErrorKind::OutOfMemory => "retry with smaller buffers",
///         ErrorKind::Poisoned => "the GPU work failed for good: restart the process",
///         _ => "a bug: report the message",
///     }
/// }
/// let e = Error::WouldOversubscribe { bytes: 1 << 40, free: 1 << 30 };
/// assert_eq!(e.kind(), ErrorKind::OutOfMemory);
/// assert_eq!(advice(&e), "retry with smaller buffers");
/// ```
///
/// Every variant of [`Error`] has exactly one kind ([`Error::kind`] is one exhaustive `match`),
/// and a driver failure ([`Error::Driver`]) is classified by its code: out of memory, a sticky
/// fault of the context, a refusal because of a capture, or [`ErrorKind::Driver`] with the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No usable device, or the device lacks what the call needs: no GPU
    /// ([`Error::NoDevice`], the answer on a machine without one), an ordinal past the last
    /// device, no managed memory, no concurrent managed access where the call needs it, a
    /// driver too old for the PTX, no stream-ordered allocator for a pool.
    Device,
    /// A buffer, kernel, node or handle used with a stream, context, device or graph that it
    /// does not belong to, where only the running program can tell (the streams of a stream
    /// set share one brand; everything else is a compile error): [`Error::StreamMismatch`],
    /// [`Error::ContextMismatch`], [`Error::WrongDevice`], [`Error::InvalidForeignStream`],
    /// [`Error::NodeOfAnotherGraph`].
    WrongOwner,
    /// A size, length, alignment, launch geometry or other value that `um` refuses before the
    /// driver sees it: buffers of different lengths, an empty allocation, a block too large, a
    /// rank outside a communicator, an environment variable it cannot read. Nothing was
    /// enqueued.
    Invalid,
    /// Not enough device memory: [`Error::WouldOversubscribe`] (refused before the driver is
    /// asked) or the driver's `CUDA_ERROR_OUT_OF_MEMORY`.
    OutOfMemory,
    /// A call made where it cannot run: a wait on a thread that captures, a capture begun where
    /// it could wait for itself, a call inside a stream callback or a thread-exit destructor,
    /// the driver's refusal of a call because of a capture; or a capture closure that did not
    /// give back every buffer. Nothing is broken: make the call elsewhere.
    NotHere,
    /// Work was lost for good and what it touched cannot be used again: a kernel fault (the
    /// driver's sticky errors: every later call of the process on that device fails too), a
    /// stream poisoned by an aborted library call, an aborted NCCL communicator, a graph that
    /// lost its buffers. Memory the work may still touch is leaked, never freed.
    Poisoned,
    /// A wait with a time limit ran out ([`Error::Timeout`]).
    Timeout,
    /// A library loaded at run time (cuBLAS, cuSPARSE, cuRAND, NCCL) is not installed, or not
    /// where it is looked for: the message says what to install.
    LibraryMissing,
    /// A library refused or failed a call ([`Error::Library`], [`Error::Nccl`], NCCL's
    /// bootstrap, two ranks' calls that do not match).
    Library,
    /// Any other failure of a driver call, with its `CUresult` code (the message names the call
    /// and the error).
    Driver(i32),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this error only says that the machine has no GPU, as on CI: callers that merely
    /// want to skip GPU work test this.
    pub fn is_no_device(&self) -> bool {
        matches!(self, Error::NoDevice { .. })
    }
}
