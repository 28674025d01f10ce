//! A CPU model of the CUDA driver, behind the `model` feature: the entry points of
//! [`super::sys`] (`driver/sys.rs`) resolve to [`api`]'s functions instead of `libcuda`'s, with the
//! same signatures and `i32` results, so that um's GPU tests run on a machine without a GPU.
//!
//! One device with concurrent managed access, or as many as `UM_MODEL_DEVICES` says
//! ([`devices`]; `UM_MODEL_NO_CONCURRENT=1` emulates the access's absence);
//! streams are ordered queues, each run by a worker thread; an operation is ordered after others
//! by a vector clock (the stream's own order, event waits, the legacy stream's implicit
//! synchronization with blocking streams), and the same clocks say what the host has waited
//! for. Memory is real host memory. Kernels run as CPU twins chosen by name
//! ([`kernels::run`]).
//!
//! The model checks um's rules and records a violation (and panics on the calling thread where
//! it can) when:
//! * the host reads or writes an allocation through um's `Deref` while work of a stream that
//!   touched it is not known to the host as finished (no wait, query or callback showed it);
//! * memory is freed while work that touches it is still pending;
//! * work on one stream touches an allocation that work on another stream touched, with no
//!   ordering edge between them;
//! * a kernel of one device's context touches device memory of another's;
//! * a thread exits while managed memory is still attached to its per-thread default stream
//!   (the driver's thread exit then never ends).
#![allow(clippy::undocumented_unsafe_blocks)]

pub(crate) mod api;
pub(crate) mod devices;
pub(crate) mod kernels;
#[cfg(test)]
mod tests;
pub(crate) mod twins;

pub(crate) use kernels::set_launch_memory;
pub use twins::{LaunchArgs, register_kernel, register_noop_kernel};

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// A vector clock: for each stream, the last of its operations something is ordered after.
pub(crate) type Clock = BTreeMap<usize, u64>;

fn join(into: &mut Clock, other: &Clock) {
    for (&s, &v) in other {
        let e = into.entry(s).or_insert(0);
        *e = (*e).max(v);
    }
}

/// The legacy default stream's id.
pub(crate) const LEGACY: usize = 1;

/// What an operation does when its stream's worker runs it.
pub(crate) enum Work {
    /// Nothing (a marker: a pool allocation's birth).
    Nop,
    /// A kernel's CPU twin.
    Kernel { name: String, args: kernels::Args },
    /// `bytes` from `src` to `dst`.
    Copy {
        dst: usize,
        src: usize,
        bytes: usize,
    },
    /// `count` elements of `width` bytes at `dst` set to `value`.
    Set {
        dst: usize,
        value: u32,
        width: usize,
        count: usize,
    },
    /// A host function, on this driver thread.
    Callback {
        f: super::sys::StreamCallback,
        data: usize,
        handle: usize,
    },
    /// An event's timestamp.
    Stamp {
        event: usize,
        generation: u64,
        queued: Instant,
    },
    /// A stream-ordered free.
    Free { address: usize },
}

impl Clone for Work {
    fn clone(&self) -> Self {
        match self {
            Work::Nop => Work::Nop,
            Work::Kernel { name, args } => Work::Kernel {
                name: name.clone(),
                args: args.clone(),
            },
            Work::Copy { dst, src, bytes } => Work::Copy {
                dst: *dst,
                src: *src,
                bytes: *bytes,
            },
            Work::Set {
                dst,
                value,
                width,
                count,
            } => Work::Set {
                dst: *dst,
                value: *value,
                width: *width,
                count: *count,
            },
            Work::Callback { f, data, handle } => Work::Callback {
                f: *f,
                data: *data,
                handle: *handle,
            },
            Work::Stamp {
                event,
                generation,
                queued,
            } => Work::Stamp {
                event: *event,
                generation: *generation,
                queued: *queued,
            },
            Work::Free { address } => Work::Free { address: *address },
        }
    }
}

/// An operation queued on a stream, or recorded into a graph.
#[derive(Clone)]
pub(crate) struct Op {
    pub(crate) work: Work,
    /// The address ranges it reads or writes.
    pub(crate) touches: Vec<(usize, usize)>,
    clock: Clock,
    seq: u64,
}

impl Op {
    pub(crate) fn new(work: Work, touches: Vec<(usize, usize)>) -> Op {
        Op {
            work,
            touches,
            clock: Clock::new(),
            seq: 0,
        }
    }
}

pub(crate) struct Stream {
    pub(crate) blocking: bool,
    queue: VecDeque<Op>,
    pub(crate) submitted: u64,
    pub(crate) completed: u64,
    /// The clock of its last operation (and of the event waits since).
    pub(crate) clock: Clock,
    destroyed: bool,
    /// The graph it records into, while capturing.
    pub(crate) capture: Option<usize>,
    /// When its last operation completed, on the device's clock: a timestamp is never earlier
    /// than the work before it, nor than its own enqueue.
    done_at: Option<Instant>,
    /// The context it belongs to (`devices::context_of`).
    pub(crate) context: usize,
}

/// Which memory an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Managed,
    Device,
    Pinned,
}

pub(crate) struct Alloc {
    pub(crate) len: usize,
    pub(crate) kind: Kind,
    layout: std::alloc::Layout,
    /// Per stream, the last operation that touched it.
    pub(crate) accesses: BTreeMap<usize, u64>,
    /// The stream it is attached to (`cuStreamAttachMemAsync`), if single.
    pub(crate) attached: Option<usize>,
    /// The pool it came from.
    pub(crate) pool: Option<usize>,
    /// The context it was allocated in: device memory is reached by that device's kernels only
    /// (the model enables no peer access).
    pub(crate) context: usize,
}

pub(crate) struct Event {
    pub(crate) timing: bool,
    /// The recording: the clock it captured, and its (stream, seq).
    pub(crate) recorded: Option<(Clock, usize, u64)>,
    pub(crate) generation: u64,
    pub(crate) stamp: Option<(u64, Instant)>,
    /// The capture it was last recorded into: a stream that waits for it joins that capture.
    pub(crate) captured: Option<usize>,
    /// The context it was made in: it is recorded on that context's streams only.
    pub(crate) context: usize,
}

/// A captured graph, and an executable graph (the same ops).
pub(crate) struct Graph {
    pub(crate) ops: Vec<Op>,
    /// `cuStreamGetCaptureInfo`'s dependency array (the last node), stable while it lives.
    pub(crate) last: Box<[usize; 1]>,
    /// A refused call invalidated the capture: its end fails.
    pub(crate) invalidated: bool,
}

pub(crate) struct Pool {
    pub(crate) threshold: u64,
    pub(crate) used: u64,
    pub(crate) reserved: u64,
}

/// The model's whole state, behind one lock.
pub(crate) struct State {
    pub(crate) streams: HashMap<usize, Stream>,
    pub(crate) events: HashMap<usize, Event>,
    pub(crate) allocs: BTreeMap<usize, Alloc>,
    pub(crate) modules: HashMap<usize, HashMap<String, kernels::Entry>>,
    pub(crate) functions: HashMap<usize, kernels::Entry>,
    pub(crate) graphs: HashMap<usize, Graph>,
    pub(crate) execs: HashMap<usize, Graph>,
    pub(crate) pools: HashMap<usize, Pool>,
    pub(crate) host: Clock,
    pub(crate) next: usize,
    /// Per device, the retains of its primary context.
    pub(crate) primary_refs: BTreeMap<i32, u32>,
    pub(crate) allocated: usize,
    pub(crate) violations: Vec<String>,
}

pub(crate) struct Model {
    pub(crate) state: Mutex<State>,
    pub(crate) changed: Condvar,
}

pub(crate) static MODEL: LazyLock<Model> = LazyLock::new(|| {
    let mut streams = HashMap::new();
    streams.insert(LEGACY, Stream::new(true));
    let model = Model {
        state: Mutex::new(State {
            streams,
            events: HashMap::new(),
            allocs: BTreeMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
            pools: HashMap::new(),
            host: Clock::new(),
            next: 0x1000,
            primary_refs: BTreeMap::new(),
            allocated: 0,
            violations: Vec::new(),
        }),
        changed: Condvar::new(),
    };
    spawn_worker(LEGACY);
    model
});

/// The model's state, locked (a panic elsewhere does not make it unusable).
pub(crate) fn lock() -> MutexGuard<'static, State> {
    MODEL.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits for a change of the state.
pub(crate) fn wait(g: MutexGuard<'static, State>) -> MutexGuard<'static, State> {
    MODEL
        .changed
        .wait(g)
        .unwrap_or_else(PoisonError::into_inner)
}

impl Stream {
    pub(crate) fn new(blocking: bool) -> Stream {
        Stream {
            blocking,
            queue: VecDeque::new(),
            submitted: 0,
            completed: 0,
            clock: Clock::new(),
            destroyed: false,
            capture: None,
            done_at: None,
            context: devices::CONTEXT0,
        }
    }
}

/// Starts the worker thread of stream `id`.
pub(crate) fn spawn_worker(id: usize) {
    let spawned = std::thread::Builder::new()
        .name(format!("um-model-stream-{id:#x}"))
        .spawn(move || worker(id));
    if let Err(e) = spawned {
        eprintln!("um model: cannot start a stream worker: {e}");
    }
}

fn ready(s: &State, op: &Op, own: usize) -> bool {
    op.clock
        .iter()
        .all(|(&d, &v)| d == own || s.streams.get(&d).is_none_or(|t| t.completed >= v))
}

thread_local! {
    /// Whether this thread is one of the model's driver threads (a stream's worker, where host
    /// functions run).
    static DRIVER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The sticky error of a kernel fault: every later call fails with it.
static STICKY: AtomicI32 = AtomicI32::new(0);

/// What every entry point answers before it looks at its arguments: `CUDA_ERROR_NOT_PERMITTED`
/// on a driver thread (a host function may not call CUDA), the sticky error after a fault.
/// What the calls that read or set only a thread's or the device's state answer first:
/// `CUDA_ERROR_NOT_PERMITTED` on a driver thread; a sticky error does not fail them.
pub(crate) fn thread_refusal() -> Option<i32> {
    DRIVER_THREAD.with(Cell::get).then_some(800)
}

/// `code`, or the sticky error of a fault the work met (what a wait or query returns).
pub(crate) fn or_sticky(code: i32) -> i32 {
    match STICKY.load(Ordering::SeqCst) {
        0 => code,
        sticky => sticky,
    }
}

pub(crate) fn refusal() -> Option<i32> {
    if let Some(code) = thread_refusal() {
        return Some(code);
    }
    match STICKY.load(Ordering::SeqCst) {
        0 => None,
        code => Some(code),
    }
}

fn worker(id: usize) {
    DRIVER_THREAD.with(|d| d.set(true));
    loop {
        let mut g = lock();
        let op = loop {
            let Some(stream) = g.streams.get(&id) else {
                return;
            };
            if let Some(front) = stream.queue.front() {
                if ready(&g, front, id) {
                    break g.streams.get_mut(&id).and_then(|s| s.queue.pop_front());
                }
            } else if stream.destroyed {
                return;
            }
            g = wait(g);
        };
        let Some(op) = op else { continue };
        if let Work::Callback { .. } = op.work {
            // What a host function is told, the host knows: its stream's work before it.
            let clock = op.clock.clone();
            join(&mut g.host, &clock);
        }
        drop(g);
        execute(&op.work, id, op.seq);
        let mut g = lock();
        // An idle stream reaches a timestamp when it is enqueued; a busy one when the work
        // before it is done: marks keep the host's order, whichever worker runs first.
        let previous = g.streams.get(&id).and_then(|s| s.done_at);
        let at = match op.work {
            Work::Stamp {
                event,
                generation,
                queued,
            } => {
                let at = previous.map_or(queued, |p| p.max(queued));
                if let Some(e) = g.events.get_mut(&event) {
                    e.stamp = Some((generation, at));
                }
                at
            }
            Work::Free { address } => {
                free_now(&mut g, address);
                Instant::now()
            }
            _ => Instant::now(),
        };
        if let Some(s) = g.streams.get_mut(&id) {
            s.completed = op.seq;
            s.done_at = Some(at);
        }
        drop(g);
        MODEL.changed.notify_all();
    }
}

/// Runs `work`, operation `seq` of stream `stream`.
fn execute(work: &Work, stream: usize, seq: u64) {
    match work {
        Work::Kernel { name, args } => {
            // A user's twin first; else the model's own: both see only checked memory.
            let mut launch = twins::LaunchArgs::new(&lock(), args, stream, seq);
            let fault = twins::run(name, &mut launch);
            if let Some(code) = fault {
                let _ = STICKY.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
        Work::Copy { dst, src, bytes } => {
            if *bytes > 0 {
                // SAFETY: um copies between allocations (or host memory) of at least `bytes`; the
                // model checked the device sides' ranges at the enqueue.
                unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *bytes) }
            }
        }
        Work::Set {
            dst,
            value,
            width,
            count,
        } => {
            for i in 0..*count {
                let p = dst + i * width;
                // SAFETY: as for a copy: `count` elements of `width` at `dst`.
                unsafe {
                    match width {
                        1 => *(p as *mut u8) = *value as u8,
                        2 => (p as *mut u16).write_unaligned(*value as u16),
                        _ => (p as *mut u32).write_unaligned(*value),
                    }
                }
            }
        }
        Work::Callback { f, data, handle } => {
            // SAFETY: the callback and its data as um gave them to `cuStreamAddCallback`.
            unsafe {
                f(
                    *handle as super::sys::CUstream,
                    STICKY.load(Ordering::SeqCst),
                    *data as *mut std::ffi::c_void,
                )
            }
        }
        Work::Nop | Work::Stamp { .. } | Work::Free { .. } => {}
    }
}

/// Frees an allocation's memory now.
pub(crate) fn free_now(g: &mut State, address: usize) {
    if let Some(a) = g.allocs.remove(&address) {
        g.allocated -= a.len;
        // SAFETY: allocated by `alloc` with this layout, and removed from the table just now.
        unsafe { std::alloc::dealloc(address as *mut u8, a.layout) }
    }
}

/// Allocates `bytes` of zeroed memory of `kind`; its address, or `None`.
pub(crate) fn alloc(g: &mut State, bytes: usize, kind: Kind) -> Option<usize> {
    let layout = std::alloc::Layout::from_size_align(bytes.max(1), 256).ok()?;
    // SAFETY: the layout's size is at least 1.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    g.allocated += bytes;
    g.allocs.insert(
        p as usize,
        Alloc {
            len: bytes,
            kind,
            layout,
            accesses: BTreeMap::new(),
            attached: None,
            pool: None,
            context: devices::CONTEXT0,
        },
    );
    Some(p as usize)
}

/// The allocation that holds `address`: its start.
pub(crate) fn find(g: &State, address: usize) -> Option<usize> {
    let (&start, a) = g.allocs.range(..=address).next_back()?;
    (address < start + a.len.max(1)).then_some(start)
}

/// Records a violation of um's rules, says it, and panics on the calling thread, unless it is
/// already unwinding (a drop during an unwind: a second panic would abort the whole run; the
/// test's guard reports the violation, and the caller refuses the call).
pub(crate) fn violation(g: MutexGuard<'static, State>, what: String) {
    let mut g = g;
    g.violations.push(what.clone());
    drop(g);
    eprintln!("um model: VIOLATION: {what}");
    if !std::thread::panicking() {
        panic!("um model: {what}");
    }
}

/// Queues `op` on stream `id` (or records it into the stream's capture); `extra` is what it is
/// ordered after besides its stream.
pub(crate) fn enqueue(mut g: MutexGuard<'static, State>, id: usize, mut op: Op) -> i32 {
    let Some(stream) = g.streams.get(&id) else {
        return 400;
    };
    if let Some(graph) = stream.capture {
        if let Some(gr) = g.graphs.get_mut(&graph) {
            gr.ops.push(op);
            gr.last[0] = gr.ops.len();
        }
        return 0;
    }
    let mut clock = stream.clock.clone();
    let blocking = stream.blocking;
    // The legacy stream's implicit synchronization: with the blocking streams of its context.
    let context = stream.context;
    if devices::is_legacy(id) {
        let others: Vec<Clock> = g
            .streams
            .iter()
            .filter(|(k, s)| {
                !devices::is_legacy(**k) && s.blocking && !s.destroyed && s.context == context
            })
            .map(|(_, s)| s.clock.clone())
            .collect();
        for c in &others {
            join(&mut clock, c);
        }
    } else if blocking {
        let legacy = g
            .streams
            .get(&devices::legacy_of(context))
            .map(|s| s.clock.clone());
        if let Some(l) = legacy {
            join(&mut clock, &l);
        }
    }
    let seq = g.streams.get(&id).map_or(0, |s| s.submitted) + 1;
    clock.insert(id, seq);
    if let Work::Kernel { name, .. } = &op.work {
        if let Some(what) = foreign_device_memory(&g, &op.touches, context, name) {
            violation(g, what);
            return 1;
        }
    }
    // Work on this stream must be ordered after every other stream's work on the same memory.
    for &(address, len) in &op.touches {
        let Some(start) = find(&g, address) else {
            continue;
        };
        let _ = len;
        let unordered = g.allocs.get(&start).and_then(|a| {
            a.accesses
                .iter()
                .find(|&(&s, &v)| {
                    s != id
                        && clock.get(&s).copied().unwrap_or(0) < v
                        && g.host.get(&s).copied().unwrap_or(0) < v
                })
                .map(|(&s, &v)| (s, v))
        });
        if let Some((s, v)) = unordered {
            violation(
                g,
                format!(
                    "work on stream {id:#x} touches the allocation at {start:#x}, which work \
                     #{v} on stream {s:#x} touches, with no ordering edge between them"
                ),
            );
            return 1;
        }
        if let Some(a) = g.allocs.get_mut(&start) {
            a.accesses.insert(id, seq);
        }
    }
    op.clock = clock.clone();
    op.seq = seq;
    if let Some(s) = g.streams.get_mut(&id) {
        s.submitted = seq;
        s.clock = clock;
        s.queue.push_back(op);
    }
    drop(g);
    MODEL.changed.notify_all();
    0
}

/// A kernel of context `context` that touches device memory of another context (of another
/// device, with no peer access): what the model says of it.
fn foreign_device_memory(
    g: &State,
    touches: &[(usize, usize)],
    context: usize,
    name: &str,
) -> Option<String> {
    touches.iter().find_map(|&(address, _)| {
        let start = find(g, address)?;
        let a = g.allocs.get(&start)?;
        (a.kind == Kind::Device && a.context != context).then(|| {
            format!(
                "kernel `{name}` of context {context:#x} touches the device memory at {start:#x} \
                 of context {:#x} (another device's, with no peer access)",
                a.context
            )
        })
    })
}

/// Blocks until stream `id` has run everything queued so far; then the host knows it.
pub(crate) fn sync_stream(
    mut g: MutexGuard<'static, State>,
    id: usize,
) -> MutexGuard<'static, State> {
    let Some(s) = g.streams.get(&id) else {
        return g;
    };
    // Its own work and what it waits for (event waits with no work behind them yet).
    let clock = s.clock.clone();
    while !done(&g, &clock) {
        g = wait(g);
    }
    join(&mut g.host, &clock);
    release_pools(&mut g);
    g
}

/// What a synchronization does with the pools' freed memory: each keeps up to its release
/// threshold for reuse, and returns the rest to the system.
pub(crate) fn release_pools(g: &mut State) {
    for p in g.pools.values_mut() {
        let unused = p.reserved.saturating_sub(p.used);
        p.reserved = p.used + unused.min(p.threshold);
    }
}

/// Whether `clock`'s work has all run.
pub(crate) fn done(g: &State, clock: &Clock) -> bool {
    clock
        .iter()
        .all(|(d, &v)| g.streams.get(d).is_none_or(|s| s.completed >= v))
}

/// Adds what the host now knows.
pub(crate) fn host_knows(g: &mut State, clock: &Clock) {
    join(&mut g.host, clock);
}

/// The check of um's host access (`Deref` of a host-owned buffer): every operation that touched
/// the allocation at `address` is one the host waited for. Addresses the model did not allocate
/// are not checked.
pub(crate) fn host_access(address: usize) {
    let g = lock();
    let Some(start) = find(&g, address) else {
        return;
    };
    if g.allocs.get(&start).is_some_and(|a| a.kind == Kind::Device) {
        violation(
            g,
            format!("the host accesses the device-only allocation at {start:#x}"),
        );
        return;
    }
    let pending = g.allocs.get(&start).and_then(|a| {
        a.accesses
            .iter()
            .find(|&(s, &v)| g.host.get(s).copied().unwrap_or(0) < v)
            .map(|(&s, &v)| (s, v))
    });
    if let Some((s, v)) = pending {
        violation(
            g,
            format!(
                "the host accesses the allocation at {start:#x} while work #{v} of stream \
                 {s:#x} that touches it is not known to have finished (no wait showed it)"
            ),
        );
    }
}

/// The violations recorded so far, taken (the list is left empty).
pub fn take_violations() -> Vec<String> {
    std::mem::take(&mut lock().violations)
}

/// Whether the model runs in place of the driver (always, where this module is compiled).
pub fn on_model() -> bool {
    true
}
