//! Every free is deferred, never dropped, while a capture may refuse it (`docs/safety.md`,
//! rule 197). One row per path that frees or may free: drops of every state and storage (device memory
//! included), the
//! sync futures (awaited, dropped unfinished), the blocking waits that fail inside a capture,
//! graphs, streams, events, context handles with modules, cuBLAS handles and NCCL
//! communicators. Each row runs inside a capture closure on the capturing thread, and (where it
//! can) on another thread while the closure runs. Each run checks:
//!
//! * the capture: valid (the graph, replayed twice, gives the right values) or failed with an
//!   `Err`, whichever the row says; never a graph that replays wrong or fails to launch;
//! * the memory: every allocation the row frees (its device address, and a mirror's pinned
//!   host half) is asked of the driver once the capture has ended and the reaper is drained
//!   (`reap_pending`): an allocation the driver still knows, at the same start and of the same
//!   size, was lost. This is exact for every storage, where the device's free memory is not
//!   (managed memory is backed lazily and returned in chunks, so `cuMemGetInfo` moves by 0 or
//!   128 MiB for a 32 MiB buffer). Rows that free no buffer of their own (a cuBLAS handle, a
//!   communicator, an event, a module) are checked by the device's free memory instead, which
//!   their allocations move by far more than the tolerance. Such a loss counts only where a
//!   second series of runs loses memory again: a free lost on every run does, while a
//!   reservation the driver makes once in the life of a context (its local memory grown for a
//!   kernel, kept until the context ends: 124 MiB at once, in one of three runs of this module on an
//!   H200) does not.
//!
//! Two rows are the leaks this rule was written against: a mirrored buffer made host-owned by
//! `from_slice_mirrored` and dropped inside the closure (its free was made on the capturing
//! thread, refused by the driver, and the memory lost for the life of the process), and
//! `block_on(y.sync_async())` on an eager buffer of the capture's stream (the future queried
//! the stream, which the driver refuses on a capturing thread, took the refusal for an error
//! and leaked the buffer).
//!
//! Every row runs once unmeasured first, so that what the driver and the libraries allocate
//! once (a first capture, a graph's first replay, cuBLAS's and NCCL's first use) is not taken
//! for a leak. Free memory is read again for up to 2 s where it lags a free (the driver hands
//! memory back late: `gpu_graphs::a_graph_dropped_with_a_replay_in_flight_is_safe`). No
//! assertion depends on timing. Both tests hold the binary's lock, so that no other allocation
//! takes a freed address between the free and the question.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use crate::common;
use common::allocation_at;

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use um::{
    Coherent, Context, Created, Error, Graph, HostOwned, Managed, Mirror, StreamOptions,
    StreamOrder, StreamOwned, relaxed_while_capturing,
};
use um_test_kernels::testing::{add_scalar, spin_then_add};

type Stream<'s> = um::Stream<'s, Created>;

/// What a row frees, made ready before the capture: run inside the closure (or on another
/// thread while it runs). Its `Err` fails the capture.
type Free<'a> = Box<dyn FnOnce() -> um::Result<()> + Send + 'a>;

/// Makes what a row frees, before the capture, on the capture's own eager stream `s`: `None`
/// where the row cannot run here (the library or the storage is not available), said why.
type Prepare = for<'a, 's> fn(&'a Context, &'a Stream<'s>) -> um::Result<Option<Free<'a>>>;

/// The outcome a row expects of the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// The capture is `Ok`, and its graph replays right.
    Valid,
    /// The capture is an `Err` (the row's own call was refused, which invalidates it).
    Fails,
}

/// Where the row's free runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Inside the capture closure, on the capturing thread.
    Inside,
    /// On another thread, while the capture closure waits for it.
    Beside,
}

enum What {
    /// Made by a [`Prepare`], freed by the closure or beside it.
    Held(Prepare),
    /// A buffer of the capture's own set, dropped inside the closure (capturing thread only:
    /// capture streams are `!Send`).
    SetBuffer,
}

struct Row {
    name: &'static str,
    what: What,
    inside: Expect,
    /// `None` where the row cannot run on another thread.
    beside: Option<Expect>,
}

/// What one run came to.
#[derive(Debug)]
enum Came {
    Valid,
    Failed(Error),
    /// The capture was `Ok` but its graph did not replay right, or a row's own check failed.
    Broken(String),
    /// The row cannot run here (said why).
    Skipped,
}

/// Elements of a row's buffer: 32 MiB of floats (small under a sanitizer).
fn len() -> usize {
    common::workload(8 << 20, 1 << 16)
}

/// What two runs of a row that frees no buffer of its own may leave behind in free memory
/// without counting as a leak.
const TOLERANCE: usize = 8 << 20;

/// How many measured runs per row and mode: two, none under a sanitizer (which compares no free
/// memory, and runs every call far slower: the unmeasured run checks the capture, and memcheck
/// its leaks).
fn runs() -> usize {
    if common::under_sanitizer() { 0 } else { 2 }
}

fn table() -> Vec<Row> {
    use Expect::{Fails, Valid};
    let row = |name, prepare: Prepare, inside, beside| Row {
        name,
        what: What::Held(prepare),
        inside,
        beside: Some(beside),
    };
    vec![
        row(
            "host-owned unified buffer dropped",
            host_owned_unified,
            Valid,
            Valid,
        ),
        row(
            "host-owned coherent buffer dropped",
            host_owned_coherent,
            Valid,
            Valid,
        ),
        // Was lost: `Managed::drop` freed host-owned memory at once, with no capture branch; the
        // driver refused the free on the capturing thread and nothing freed it later.
        row(
            "host-owned mirrored buffer (from_slice_mirrored) dropped",
            host_owned_mirrored,
            Valid,
            Valid,
        ),
        row(
            "host-owned mirrored buffer dropped inside relaxed_while_capturing",
            host_owned_mirrored_relaxed,
            Valid,
            Valid,
        ),
        row(
            "host-owned device buffer (from_slice_device) dropped",
            host_owned_device,
            Valid,
            Valid,
        ),
        row(
            "stream-owned unified buffer dropped with its kernel running",
            stream_owned_unified,
            Valid,
            Valid,
        ),
        row(
            "stream-owned mirrored buffer dropped with its kernel running",
            stream_owned_mirrored,
            Valid,
            Valid,
        ),
        row(
            "stream-owned device buffer dropped with its kernel running",
            stream_owned_device,
            Valid,
            Valid,
        ),
        Row {
            name: "buffer of the capture's own set dropped in the closure",
            what: What::SetBuffer,
            inside: Fails,
            beside: None,
        },
        // Was lost: the future's `poll` queried the stream after the callback reported success;
        // the driver refused the query on the capturing thread, and the future leaked the
        // buffer as if the stream had failed.
        row(
            "block_on(y.sync_async()) on an eager buffer of the capture's stream",
            sync_future_awaited,
            Valid,
            Valid,
        ),
        row(
            "block_on(s.sync_all_async((y,))) on the capture's stream",
            sync_all_future_awaited,
            Valid,
            Valid,
        ),
        row(
            "sync future dropped before its stream reached it",
            sync_future_dropped,
            Valid,
            Valid,
        ),
        row(
            "sync future polled once (its stream still busy), then dropped",
            sync_future_polled_then_dropped,
            Valid,
            Valid,
        ),
        row(
            "async stream scope dropped unfinished, its buffer inside its sync future",
            async_scope_dropped,
            Valid,
            Valid,
        ),
        row(
            "blocking sync of an eager buffer (refused on the capturing thread)",
            blocking_sync,
            Fails,
            Valid,
        ),
        row(
            "graph holding a buffer dropped with a replay in flight",
            graph_dropped,
            Valid,
            Valid,
        ),
        row(
            "graph synced (its wait refused on the capturing thread)",
            graph_synced,
            Fails,
            Valid,
        ),
        row(
            "stream scope ended with its buffer dropped and its kernel running",
            stream_scope_ended,
            Valid,
            Valid,
        ),
        row(
            "stream order (an event) dropped",
            stream_order_dropped,
            Valid,
            Valid,
        ),
        row(
            "context handle with a module loaded dropped",
            context_handle_dropped,
            Valid,
            Valid,
        ),
        row("cuBLAS handles dropped", blas_dropped, Valid, Valid),
        row("NCCL communicator dropped", comm_dropped, Valid, Valid),
        // A refused wait fails the capture (an `Err`), as a blocking `sync` does; it is no error
        // of the stream or of the communicator: nothing is aborted on the capturing thread (an
        // abort frees and destroys) and no stream is poisoned (its buffers would be leaked).
        row(
            "NCCL all-reduce on the capture's stream, then Comm::wait (its query refused there)",
            comm_waited,
            Fails,
            Valid,
        ),
        // An abort asked for in the closure: marked at once, its `ncclCommAbort` (which frees
        // and waits) made once the capture has ended. The communicator enqueued nothing, so no
        // stream of the capture is poisoned, and the capture stays valid.
        row(
            "NCCL communicator aborted (Comm::abort), then dropped",
            comm_aborted,
            Valid,
            Valid,
        ),
    ]
}

// --- What each row frees -------------------------------------------------------------------

/// A buffer of `s`, written by a kernel (2.0 each): its pages are on the device.
fn eager<'s>(ctx: &Context, s: &Stream<'s>) -> um::Result<Managed<[f32], StreamOwned<'s>>> {
    let mut y = Managed::from_fn(ctx, len(), |_| 1.0f32)?.attach(s)?;
    watch_buffer(&y);
    add_scalar(s, &mut y, 1.0)?;
    Ok(y)
}

/// As [`eager`], with its kernel still running for about 20 ms when the row frees it.
fn busy<'s>(ctx: &Context, s: &Stream<'s>) -> um::Result<Managed<[f32], StreamOwned<'s>>> {
    let mut y = eager(ctx, s)?;
    spin_then_add(s, &mut y, 1.0, 20_000_000)?;
    Ok(y)
}

/// The allocations the current run frees: (start address, size in bytes), as the driver gave
/// them while they were live.
static WATCHED: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());

/// Remembers the allocation at `address` (live now) as one the run must free.
fn watch(address: u64) {
    let range = allocation_at(address).expect("a live allocation is known to the driver");
    WATCHED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(range);
}

/// Remembers a stream-owned buffer's device allocation.
fn watch_buffer<M: um::Storage>(y: &Managed<[f32], StreamOwned<'_>, M>) {
    watch(y.as_device_ptr().address());
}

/// The watched allocations the driver still knows (same start, same size): lost. Empties the
/// list.
fn still_allocated() -> (usize, Vec<(u64, usize)>) {
    let watched = std::mem::take(
        &mut *WATCHED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let lost = watched
        .iter()
        .copied()
        .filter(|&(start, size)| allocation_at(start) == Some((start, size)))
        .collect();
    (watched.len(), lost)
}

/// The buffer's values, once back on the host: `want` everywhere.
fn assert_all(y: &[f32], want: f32) {
    if let Some(i) = y.iter().position(|v| *v != want) {
        panic!("element {i} is {}, not {want}", y[i]);
    }
}

fn host_owned_unified<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    // Host-owned, its pages still on the device (nothing on the CPU touched them since).
    let h = eager(ctx, s)?.sync()?;
    Ok(Some(Box::new(move || {
        drop(h);
        Ok(())
    })))
}

/// A host-owned coherent buffer whose pages a kernel of `s` wrote (they are on the device);
/// `None`, said, where coherent memory is refused (a device without concurrent managed access).
fn coherent_on_device(
    ctx: &Context,
    s: &Stream<'_>,
) -> um::Result<Option<Managed<[f32], HostOwned, Coherent>>> {
    let h = match Managed::from_fn_coherent(ctx, len(), |_| 1.0f32) {
        Ok(h) => h,
        Err(Error::NeedsConcurrentManagedAccess { device }) => {
            eprintln!("skipped: coherent memory needs concurrent managed access (device {device})");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut h = h.attach(s)?;
    watch_buffer(&h);
    add_scalar(s, &mut h, 1.0)?;
    Ok(Some(h.sync()?))
}

fn host_owned_coherent<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let Some(h) = coherent_on_device(ctx, s)? else {
        return Ok(None);
    };
    Ok(Some(Box::new(move || {
        drop(h);
        Ok(())
    })))
}

/// A host-owned mirror, both halves watched (the device half's address is known only while the
/// buffer is stream-owned: an attach and a `sync` with no launch between, which copy nothing).
fn watched_mirror<'s>(
    s: &Stream<'s>,
    h: Managed<[f32], HostOwned, Mirror>,
) -> um::Result<Managed<[f32], HostOwned, Mirror>> {
    watch(h.as_ptr() as u64);
    let y = h.attach(s)?;
    watch_buffer(&y);
    y.sync()
}

fn host_owned_mirrored<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let big = vec![1.0f32; len()];
    let h = watched_mirror(s, Managed::from_slice_mirrored(ctx, &big)?)?;
    Ok(Some(Box::new(move || {
        drop(h);
        Ok(())
    })))
}

fn host_owned_mirrored_relaxed<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let h = watched_mirror(s, Managed::from_fn_mirrored(ctx, len(), |_| 1.0f32)?)?;
    Ok(Some(Box::new(move || relaxed_while_capturing(|| drop(h)))))
}

/// A host-owned device buffer a kernel of `s` wrote, its allocation watched (its address is
/// known only while it is stream-owned).
fn host_owned_device<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    let mut y = Managed::from_slice_device(ctx, &vec![1.0f32; len()])?.attach(s)?;
    watch_buffer(&y);
    add_scalar(s, &mut y, 1.0)?;
    let h = y.sync()?;
    Ok(Some(Box::new(move || {
        drop(h);
        Ok(())
    })))
}

fn stream_owned_device<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let mut y = Managed::from_slice_device(ctx, &vec![1.0f32; len()])?.attach(s)?;
    watch_buffer(&y);
    spin_then_add(s, &mut y, 1.0, 20_000_000)?;
    Ok(Some(Box::new(move || {
        drop(y);
        Ok(())
    })))
}

fn stream_owned_unified<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let y = busy(ctx, s)?;
    Ok(Some(Box::new(move || {
        drop(y);
        Ok(())
    })))
}

fn stream_owned_mirrored<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let mut y = Managed::from_fn_mirrored(ctx, len(), |_| 1.0f32)?.attach(s)?;
    watch_buffer(&y);
    spin_then_add(s, &mut y, 1.0, 20_000_000)?;
    Ok(Some(Box::new(move || {
        drop(y);
        Ok(())
    })))
}

fn sync_future_awaited<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let y = eager(ctx, s)?;
    Ok(Some(Box::new(move || {
        let y = pollster::block_on(y.sync_async())?;
        assert_all(&y, 2.0);
        Ok(())
    })))
}

fn sync_all_future_awaited<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let y = busy(ctx, s)?;
    Ok(Some(Box::new(move || {
        let (y,) = pollster::block_on(s.sync_all_async((y,)))?;
        assert_all(&y, 3.0);
        Ok(())
    })))
}

fn sync_future_dropped<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let y = busy(ctx, s)?;
    Ok(Some(Box::new(move || {
        drop(y.sync_async()); // made (its callback enqueued), never polled
        Ok(())
    })))
}

fn sync_future_polled_then_dropped<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let y = busy(ctx, s)?;
    Ok(Some(Box::new(move || {
        let mut fut = std::pin::pin!(y.sync_async());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // Pending while the kernel spins (20 ms); were it ready, the buffer would come back to
        // the host and be dropped as such (another row).
        let polled = fut.as_mut().poll(&mut cx);
        println!(
            "  the sync future, polled once: pending {}",
            polled.is_pending()
        );
        drop(polled);
        Ok(()) // the future is dropped here, its waker registered
    })))
}

fn async_scope_dropped<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    // Coherent memory: its attach makes no association call, which a capturing thread could
    // not make.
    let Some(h) = coherent_on_device(ctx, s)? else {
        return Ok(None);
    };
    Ok(Some(Box::new(move || {
        let scope = ctx.with_stream_async(
            StreamOptions::new().non_blocking(),
            async move |t: &um::Stream<'_, Created>| {
                let mut h = h.attach(t)?;
                spin_then_add(t, &mut h, 1.0, 20_000_000)?;
                h.sync_async().await.map(drop)
            },
        );
        let mut scope = std::pin::pin!(scope);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match scope.as_mut().poll(&mut cx) {
            std::task::Poll::Pending => {
                println!("  the async scope, polled once: pending");
                Ok(()) // dropped here unfinished: its future, its sync future, its stream
            }
            std::task::Poll::Ready(r) => r,
        }
    })))
}

fn blocking_sync<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    let y = busy(ctx, s)?;
    Ok(Some(Box::new(move || {
        // On the capturing thread the wait is refused: the `Err` fails the capture, and the
        // buffer, dropped by the failed `sync`, is freed behind its stream.
        let y = y.sync()?;
        assert_all(&y, 3.0);
        Ok(())
    })))
}

/// A graph of `s` holding one buffer of `s`.
type Held<'s> = Graph<'s, Created, (Managed<[f32], StreamOwned<'s>>,)>;

/// A graph of `s` holding a buffer of `s`, replayed once (the replay may still run).
fn replayed_graph<'s>(ctx: &Context, s: &Stream<'s>) -> um::Result<Held<'s>> {
    let y = eager(ctx, s)?;
    let (graph, ()) = s.capture((y,), |cap, (mut y,)| {
        spin_then_add(cap, &mut y, 1.0, 20_000_000)?;
        Ok(((y,), ()))
    })?;
    graph.launch(s)?;
    Ok(graph)
}

fn graph_dropped<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    let graph = replayed_graph(ctx, s)?;
    Ok(Some(Box::new(move || {
        drop(graph);
        Ok(())
    })))
}

fn graph_synced<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    let graph = replayed_graph(ctx, s)?;
    Ok(Some(Box::new(move || {
        let (y,) = graph.sync()?;
        assert_all(&y, 3.0);
        Ok(())
    })))
}

fn stream_scope_ended<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    // Coherent memory: its attach makes no association call, which a capturing thread could
    // not make.
    let Some(h) = coherent_on_device(ctx, s)? else {
        return Ok(None);
    };
    Ok(Some(Box::new(move || {
        ctx.with_stream(StreamOptions::new().non_blocking(), |t| {
            let mut h = h.attach(t)?;
            spin_then_add(t, &mut h, 1.0, 20_000_000)?;
            drop(h); // freed behind `t`, after the kernel
            Ok(())
        }) // `t` is destroyed here (on the capturing thread: once the capture has ended)
    })))
}

fn stream_order_dropped<'a, 's>(
    ctx: &'a Context,
    s: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let order = StreamOrder::new(ctx)?;
    order.record(s)?;
    Ok(Some(Box::new(move || {
        drop(order);
        Ok(())
    })))
}

fn context_handle_dropped<'a, 's>(
    _: &'a Context,
    _: &'a Stream<'s>,
) -> um::Result<Option<Free<'a>>> {
    let handle = common::handle_with_a_module();
    Ok(Some(Box::new(move || {
        drop(handle);
        Ok(())
    })))
}

fn blas_dropped<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    use um::cublas::{Blas, Gemm};
    let n = 64;
    let a = Managed::from_slice(ctx, &vec![1.0f32; n * n])?.attach(s)?;
    let mut c = Managed::from_slice(ctx, &vec![0.0f32; n * n])?.attach(s)?;
    let mut handles = Vec::new();
    // Eight, each used once (its workspace in use): what one handle holds may be small.
    for _ in 0..8 {
        let blas = match Blas::new(ctx) {
            Ok(blas) => blas,
            Err(e) => {
                eprintln!("skipped: no cuBLAS ({e})");
                return Ok(None);
            }
        };
        blas.gemm(s, &Gemm::new(n, n, n), &a, &a, &mut c)
            .expect("gemm");
        handles.push(blas);
    }
    drop(s.sync_all((a, c))?);
    Ok(Some(Box::new(move || {
        drop(handles);
        Ok(())
    })))
}

fn comm_dropped<'a, 's>(ctx: &'a Context, _: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    let Some(comm) = common::one_rank_comm(ctx, um::nccl::CommOptions::new()) else {
        return Ok(None);
    };
    Ok(Some(Box::new(move || {
        drop(comm);
        Ok(())
    })))
}

fn comm_waited<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    let options = um::nccl::CommOptions::new();
    let Some(comm) = common::one_rank_comm(ctx, options) else {
        return Ok(None);
    };
    // Mirrored: NCCL takes no unified memory without concurrent managed access.
    let mut y = Managed::from_fn_mirrored(ctx, len(), |_| 1.0f32)?.attach(s)?;
    watch_buffer(&y);
    comm.all_reduce_in_place(s, &mut y, um::nccl::ReduceOp::Sum)?;
    Ok(Some(Box::new(move || {
        let waited = comm.wait(s, Duration::from_secs(20));
        println!("  Comm::wait: {waited:?}");
        drop(y); // behind its stream (at once beside the capture), unless the stream was poisoned
        drop(comm);
        waited
    })))
}

fn comm_aborted<'a, 's>(ctx: &'a Context, s: &'a Stream<'s>) -> um::Result<Option<Free<'a>>> {
    let Some(comm) = common::one_rank_comm(ctx, um::nccl::CommOptions::new()) else {
        return Ok(None);
    };
    Ok(Some(Box::new(move || {
        comm.abort();
        assert!(comm.is_aborted(), "the abort is marked at once");
        let waited = comm.wait(s, Duration::from_secs(20));
        assert!(
            matches!(waited, Err(Error::CommunicatorAborted { .. })),
            "an aborted communicator refuses its calls: {waited:?}"
        );
        assert!(!s.is_poisoned(), "it enqueued nothing on the stream");
        drop(comm);
        Ok(())
    })))
}

// --- Running a row -------------------------------------------------------------------------

fn free_memory(ctx: &Context) -> usize {
    ctx.mem_info().map_or(0, |(free, _)| free)
}

/// After a capture: the reaper drained, the device idle.
fn settle(ctx: &Context) {
    um::reap_pending();
    ctx.wait_idle().expect("the context still works");
    um::reap_pending();
}

/// One run of `row` in `mode`: what the capture came to.
fn run_once(ctx: &Context, row: &Row, mode: Mode) -> Came {
    let _dog = common::watchdog(row.name);
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).expect("x");
    let came = ctx.with_stream(StreamOptions::new(), |s| {
        Ok(match row.what {
            What::SetBuffer => set_buffer_dropped(s, x.attach(s)?, eager(ctx, s)?),
            What::Held(prepare) => {
                let Some(free) = prepare(ctx, s)? else {
                    return Ok(Came::Skipped);
                };
                let x = x.attach(s)?;
                let captured = s.capture((x,), |cap, (mut x,)| {
                    add_scalar(cap, &mut x, 1.0)?;
                    match mode {
                        Mode::Inside => free()?,
                        Mode::Beside => std::thread::scope(|t| t.spawn(free).join())
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?,
                    }
                    add_scalar(cap, &mut x, 1.0)?; // recorded after the free
                    Ok(((x,), ()))
                });
                replay(s, captured)
            }
        })
    });
    came.unwrap_or_else(|e| Came::Broken(format!("the stream scope: {e}")))
}

/// The capture's graph replayed twice: each replay adds 2 to every element of `x`.
fn replay<'s>(s: &Stream<'s>, captured: um::Result<(Held<'s>, ())>) -> Came {
    let graph = match captured {
        Ok((graph, ())) => graph,
        Err(e) => return Came::Failed(e),
    };
    let replayed = graph
        .launch(s)
        .and_then(|()| graph.launch(s))
        .and_then(|()| graph.sync());
    match replayed {
        Ok((x,)) if x.iter().all(|v| *v == 4.0) => Came::Valid,
        Ok((x,)) => Came::Broken(format!("the replays gave {:?}, not 4.0", &x[..4])),
        Err(e) => Came::Broken(format!("a valid capture failed to replay: {e}")),
    }
}

/// The capture set's second buffer dropped in the closure: lost to the graph, so the capture is
/// `CaptureLostBuffer`, and the buffer is freed once its stream is done.
fn set_buffer_dropped<'s>(
    s: &Stream<'s>,
    x: Managed<[f32], StreamOwned<'s>>,
    big: Managed<[f32], StreamOwned<'s>>,
) -> Came {
    let captured = s.capture(vec![x, big], |cap, mut set| {
        for b in &mut set {
            add_scalar(cap, b, 1.0)?;
        }
        drop(set.pop());
        Ok((set, ()))
    });
    match captured {
        Err(e @ Error::CaptureLostBuffer { lost: 1 }) => Came::Failed(e),
        Err(e) => Came::Broken(format!("not the lost buffer's error: {e}")),
        Ok(_) => Came::Broken("a capture that lost a buffer was Ok".to_owned()),
    }
}

/// Whether `came` is what `expect` says; the reason if not.
fn judge(came: &Came, expect: Expect) -> Result<(), String> {
    match (came, expect) {
        (Came::Valid, Expect::Valid) | (Came::Failed(_), Expect::Fails) | (Came::Skipped, _) => {
            Ok(())
        }
        (Came::Failed(e), Expect::Valid) => Err(format!("the capture failed: {e}")),
        (Came::Valid, Expect::Fails) => Err("the capture was Ok where it must fail".to_owned()),
        (Came::Broken(why), _) => Err(format!("broken: {why}")),
    }
}

/// Runs `row` in `mode`: once unmeasured, then [`runs`] times. Every run's capture is judged,
/// and every allocation it watched must be gone once the run has settled; a row that watched
/// none must leave the device's free memory where it was. The failures, each with the row's name.
fn check(ctx: &Context, row: &Row, mode: Mode, expect: Expect) -> Vec<String> {
    let counts = common::counts_free_memory();
    let mut failures = Vec::new();
    let mut note = |what: String| failures.push(format!("{} ({mode:?}): {what}", row.name));
    let came = run_once(ctx, row, mode);
    println!("{} ({mode:?}), unmeasured: {came:?}", row.name);
    settle(ctx);
    let (watched, lost) = still_allocated();
    if let Came::Skipped = came {
        return failures;
    }
    if let Err(why) = judge(&came, expect) {
        note(why);
    }
    if !lost.is_empty() {
        note(format!(
            "unmeasured run: {} of {watched} allocations not freed: {lost:x?}",
            lost.len()
        ));
    }
    let before = free_memory(ctx);
    let mut buffers = watched;
    for run in 0..runs() {
        let came = run_once(ctx, row, mode);
        settle(ctx);
        let (watched, lost) = still_allocated();
        // The free memory after each run too: a row that loses memory once (an allocation of
        // the library's, made late) and one that loses it on every run read differently.
        println!(
            "{} ({mode:?}), run {run}: {came:?}; {watched} allocations watched; free {:.1} MiB",
            row.name,
            free_memory(ctx) as f64 / (1 << 20) as f64
        );
        if let Err(why) = judge(&came, expect) {
            note(format!("run {run}: {why}"));
        }
        if !lost.is_empty() {
            note(format!(
                "run {run}: {} of {watched} allocations not freed: {lost:x?}",
                lost.len()
            ));
        }
        buffers = buffers.max(watched);
    }
    if buffers > 0 || runs() == 0 {
        return failures;
    }
    // No buffer of the row's own: the device's free memory tells.
    let after = free_after(ctx, before);
    println!(
        "{} ({mode:?}): free {:.1} MiB before {} runs, {:.1} MiB after",
        row.name,
        before as f64 / (1 << 20) as f64,
        runs(),
        after as f64 / (1 << 20) as f64
    );
    if counts && after + TOLERANCE < before {
        // Lost only if a second series loses memory again (the module's header says why).
        let again = lost_again(ctx, || drop(run_once(ctx, row, mode)));
        if let Some((again_before, again_after)) = again {
            note(format!(
                "{} MiB lost over {} runs ({before} bytes free before, {after} after), and {} MiB \
                 over {} more ({again_before} before, {again_after} after)",
                (before - after) >> 20,
                runs(),
                (again_before - again_after) >> 20,
                runs()
            ));
        }
    }
    failures
}

/// Every row in `mode`; then the context must still run work (nothing was freed under a
/// kernel: that would be a sticky error), and no row may have failed.
fn every_row(mode: Mode) {
    let _serial = common::serial();
    let Some(ctx) = common::device_for_captures() else {
        return;
    };
    let mut failures = Vec::new();
    for row in table() {
        let expect = match mode {
            Mode::Inside => Some(row.inside),
            Mode::Beside => row.beside,
        };
        if let Some(expect) = expect {
            failures.extend(check(&ctx, &row, mode, expect));
        }
    }
    common::assert_context_usable(&ctx);
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each free path run inside a capture closure, on the capturing thread, where the driver
/// refuses frees and waits (thread-local mode): every free is deferred and made once the
/// capture has ended (or by the reaper thread), the capture stays valid unless the row's own
/// call was a refused wait, and no memory is lost.
#[test]
#[ignore = "needs a CUDA device"]
fn every_free_inside_a_capture_closure_is_deferred_and_nothing_is_lost() {
    let _serial = crate::common::serial();
    every_row(Mode::Inside);
}

/// Each free path run on another thread while a capture closure runs: `um` captures in
/// thread-local mode, so that thread's frees and waits go through (a device-wide wait, as
/// cuBLAS's destroy makes, is kept for the capture's end), the capture stays valid, and no
/// memory is lost.
#[test]
#[ignore = "needs a CUDA device"]
fn every_free_on_another_thread_during_a_capture_keeps_it_valid_and_nothing_is_lost() {
    let _serial = crate::common::serial();
    every_row(Mode::Beside);
}

// --- Captures that end abnormally, nest, or begin where the thread's records are going --------

/// Free memory once the device is settled, read again for up to 2 s while it is below `before`
/// (the driver hands memory back late).
fn free_after(ctx: &Context, before: usize) -> usize {
    settle(ctx);
    let mut after = free_memory(ctx);
    let t = Instant::now();
    while after + TOLERANCE < before && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(50));
        after = free_memory(ctx);
    }
    after
}

/// Runs `run` once unmeasured, then [`runs`] times. Every allocation a run watched must be gone
/// once it has settled (as in [`check`]); where no run watched any, the device's free memory
/// must be back where it was. The failures of each run, each named `name`.
fn measured(ctx: &Context, name: &str, mut run: impl FnMut() -> Result<(), String>) -> Vec<String> {
    let counts = common::counts_free_memory();
    let mut failures = Vec::new();
    drop(still_allocated()); // nothing of an earlier test
    let mut watched_any = 0;
    let mut once = |label: String, failures: &mut Vec<String>| {
        if let Err(why) = run() {
            failures.push(format!("{name}, {label}: {why}"));
        }
        settle(ctx);
        let (watched, lost) = still_allocated();
        if !lost.is_empty() {
            failures.push(format!(
                "{name}, {label}: {} of {watched} allocations not freed: {lost:x?}",
                lost.len()
            ));
        }
        watched
    };
    watched_any += once("unmeasured".to_owned(), &mut failures);
    let before = free_memory(ctx);
    for i in 0..runs() {
        watched_any += once(format!("run {i}"), &mut failures);
    }
    if watched_any > 0 {
        return failures;
    }
    let after = free_after(ctx, before);
    println!(
        "{name}: free {:.1} MiB before {} runs, {:.1} MiB after",
        before as f64 / (1 << 20) as f64,
        runs(),
        after as f64 / (1 << 20) as f64
    );
    if counts && after + TOLERANCE < before {
        // Lost only if a second series loses memory again (the module's header says why).
        if let Some((again_before, again_after)) = lost_again(ctx, || drop(run())) {
            failures.push(format!(
                "{name}: {} MiB lost over {} runs, and {} MiB over {} more",
                (before - after) >> 20,
                runs(),
                (again_before - again_after) >> 20,
                runs()
            ));
        }
    }
    failures
}

/// After a series of runs that lost free memory: [`runs`] more runs of `run`, each settled and
/// its watched allocations forgotten. The free memory before and after them where they lost
/// memory too (a free lost on every run); `None` where they did not (a reservation the driver
/// made once, during the first series).
fn lost_again(ctx: &Context, mut run: impl FnMut()) -> Option<(usize, usize)> {
    let before = free_memory(ctx);
    for _ in 0..runs() {
        run();
        settle(ctx);
        drop(still_allocated());
    }
    let after = free_after(ctx, before);
    println!(
        "a second series of {} runs: free {:.1} MiB before, {:.1} MiB after",
        runs(),
        before as f64 / (1 << 20) as f64,
        after as f64 / (1 << 20) as f64
    );
    (after + TOLERANCE < before).then_some((before, after))
}

/// A test of one scenario: on the device captures need, alone in the binary and under a
/// watchdog named `name`, `run` is [`measured`] and every check must hold ([`assert_none`]).
fn measured_test(name: &'static str, run: fn(&Context) -> Result<(), String>) {
    let _serial = common::serial();
    let Some(ctx) = common::device_for_captures() else {
        return;
    };
    let _dog = common::watchdog(name);
    let failures = measured(&ctx, name, || run(&ctx));
    assert_none(&ctx, &failures);
}

/// Every check of a test: none may have failed, and the context still runs work (nothing was
/// freed under a kernel: that would be a sticky error).
fn assert_none(ctx: &Context, failures: &[String]) {
    common::assert_context_usable(ctx);
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn text(e: Error) -> String {
    e.to_string()
}

/// One capture whose closure drops a host-owned mirrored buffer (kept for the end of the
/// thread's captures), an eager buffer with its kernel running (behind its stream) and a buffer
/// of its own set (kept by the scope), then panics. Afterwards the capture's stream runs a
/// fresh buffer of the same size right (a free made twice, or under a kernel, would show
/// there or as a sticky error).
fn panicking_capture(ctx: &Context) -> Result<(), String> {
    let host = Managed::from_fn_mirrored(ctx, len(), |_| 1.0f32).map_err(text)?;
    watch(host.as_ptr() as u64);
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).map_err(text)?;
    let came = ctx.with_stream(StreamOptions::new(), |s| {
        let set = vec![x.attach(s)?, eager(ctx, s)?];
        let y = busy(ctx, s)?;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            type Set<'s> = Vec<Managed<[f32], StreamOwned<'s>>>;
            let _: um::Result<(Graph<'_, Created, Set<'_>>, ())> =
                s.capture(set, |cap, mut set| {
                    for b in &mut set {
                        add_scalar(cap, b, 1.0)?;
                    }
                    drop(host);
                    drop(y);
                    drop(set.pop());
                    panic!("a capture closure that panics (on purpose)");
                });
        }));
        if caught.is_ok() {
            return Ok(Err("the closure's panic did not come through".to_owned()));
        }
        settle(ctx);
        let mut probe = Managed::from_fn(ctx, len(), |_| 1.0f32)?.attach(s)?;
        add_scalar(s, &mut probe, 1.0)?;
        let probe = probe.sync()?;
        Ok(match probe.iter().position(|v| *v != 2.0) {
            None => Ok(()),
            Some(i) => Err(format!("after the panic, element {i} is {}", probe[i])),
        })
    });
    came.unwrap_or_else(|e| Err(format!("the stream scope: {e}")))
}

/// A capture closure that panics after dropping buffers of every kind: what it dropped is freed
/// once the capture has unwound (the scope's drop ends the capture and frees what it kept; the
/// thread's kept work runs when its count of captures returns to 0), once, after the kernels
/// that used it, and nothing is lost.
#[test]
#[ignore = "needs a CUDA device"]
fn what_a_panicking_capture_closure_dropped_is_freed_once_it_has_unwound() {
    let _serial = crate::common::serial();
    measured_test("a capture closure that panics", panicking_capture);
}

/// A capture begun inside another's closure (on another eager stream): its closure drops a
/// buffer of the outer capture's set (kept for the outer scope), a host-owned mirrored buffer
/// (freed once the outer capture, the thread's last, has ended) and an eager buffer of its own
/// stream with its kernel running (behind that stream); the inner graph, if made, is dropped in
/// the outer closure. The outer capture lost a buffer, so it must be an `Err`; nothing is lost.
fn nested_capture(ctx: &Context) -> Result<(), String> {
    let host = Managed::from_fn_mirrored(ctx, len(), |_| 1.0f32).map_err(text)?;
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).map_err(text)?;
    let y = Managed::from_slice(ctx, &[0.0f32; 256]).map_err(text)?;
    let mut inner_came = String::from("not begun");
    let outer = ctx.with_stream(StreamOptions::new(), |s| {
        let set = vec![x.attach(s)?, eager(ctx, s)?];
        ctx.with_stream(StreamOptions::new(), |t| {
            let y = y.attach(t)?;
            let busy_t = busy(ctx, t)?;
            let captured = s.capture(set, |cap, mut set| {
                for b in &mut set {
                    add_scalar(cap, b, 1.0)?;
                }
                let lost = set.pop();
                let inner = t.capture((y,), |icap, (mut y,)| {
                    add_scalar(icap, &mut y, 1.0)?;
                    drop(lost);
                    drop(host);
                    drop(busy_t);
                    Ok(((y,), ()))
                });
                inner_came = match &inner {
                    Ok(_) => "Ok".to_owned(),
                    Err(e) => format!("Err({e})"),
                };
                drop(inner);
                Ok((set, ()))
            });
            Ok(captured.map(drop))
        })
    });
    println!("  nested: inner {inner_came}; outer {outer:?}");
    match outer {
        Ok(Err(_)) => Ok(()),
        Ok(Ok(())) => Err("the outer capture lost a buffer and was Ok".to_owned()),
        Err(e) => Err(format!("the stream scopes: {e}")),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn what_a_nested_capture_closure_drops_is_freed_after_the_outer_capture_and_nothing_is_lost() {
    let _serial = crate::common::serial();
    measured_test("nested captures", nested_capture);
}

/// Buffers of the legacy stream (`attach_global`) and of the thread's per-thread stream, their
/// kernels running, dropped inside a capture closure: each is freed behind a callback on its
/// own stream (enqueued from the capturing thread), the capture stays valid (its graph replays
/// right), and nothing is lost.
fn legacy_and_per_thread_buffers_dropped(ctx: &Context) -> Result<(), String> {
    let a = Managed::from_fn(ctx, len(), |_| 1.0f32).map_err(text)?;
    let b = Managed::from_fn(ctx, len(), |_| 1.0f32).map_err(text)?;
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).map_err(text)?;
    let came = ctx.with_legacy_stream(|l| {
        let mut a = a.attach_global(l)?;
        spin_then_add(l, &mut a, 1.0, 20_000_000)?;
        ctx.with_per_thread_stream(|p| {
            let mut b = b.attach(p)?;
            spin_then_add(p, &mut b, 1.0, 20_000_000)?;
            ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
                let x = x.attach(s)?;
                let captured = s.capture((x,), |cap, (mut x,)| {
                    add_scalar(cap, &mut x, 1.0)?;
                    drop(a);
                    drop(b);
                    add_scalar(cap, &mut x, 1.0)?;
                    Ok(((x,), ()))
                });
                Ok(replay(s, captured))
            })
        })
    });
    match came {
        Ok(Came::Valid) => Ok(()),
        Ok(other) => Err(format!("{other:?}")),
        Err(e) => Err(format!("the stream scopes: {e}")),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn legacy_and_per_thread_buffers_dropped_in_a_capture_are_freed_behind_their_streams() {
    let _serial = crate::common::serial();
    measured_test(
        "legacy and per-thread buffers",
        legacy_and_per_thread_buffers_dropped,
    );
}

/// Work kept for the end of a capture (`defer_while_capturing`) that begins a capture of its own
/// and drops a host-owned mirrored buffer in that closure: it runs inside the end of the first
/// capture, the buffer is kept again and freed when the second one ends, and both captures are
/// valid. Both halves of the buffer are watched: each must be gone from the driver once the run
/// has settled (a check of those two allocations, not of the device's free memory, which the
/// driver's own allocations move).
fn capture_in_kept_work(ctx: &Context) -> Result<(), String> {
    let held = ctx
        .with_stream(StreamOptions::new(), |s| {
            watched_mirror(s, Managed::from_fn_mirrored(ctx, len(), |_| 1.0f32)?)
        })
        .map_err(text)?;
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).map_err(text)?;
    let said = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let (kept_ctx, kept_said) = (ctx.clone(), std::sync::Arc::clone(&said));
    let kept = move || {
        let r = Managed::from_slice(&kept_ctx, &[0.0f32; 256]).and_then(|y| {
            kept_ctx.with_stream(StreamOptions::new(), |t| {
                let y = y.attach(t)?;
                let (graph, ()) = t.capture((y,), |cap, (mut y,)| {
                    add_scalar(cap, &mut y, 1.0)?;
                    drop(held);
                    Ok(((y,), ()))
                })?;
                graph.launch(t)?;
                let (y,) = graph.sync()?;
                Ok(y[0])
            })
        });
        *kept_said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(format!("{r:?}"));
    };
    let came = ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let mut ran_now = false;
        let captured = s.capture((x,), |cap, (mut x,)| {
            add_scalar(cap, &mut x, 1.0)?;
            ran_now = um::defer_while_capturing(kept);
            add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        });
        Ok((ran_now, replay(s, captured)))
    });
    let said = said
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    match came {
        Ok((false, Came::Valid)) if said.as_deref() == Some("Ok(1.0)") => Ok(()),
        Ok((ran_now, came)) => Err(format!(
            "the first capture: {came:?} (kept work ran inside it: {ran_now}); the kept work's \
             capture: {said:?}"
        )),
        Err(e) => Err(format!("the stream scope: {e}")),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_begun_by_work_kept_for_a_capture_end_frees_what_it_drops_too() {
    let _serial = crate::common::serial();
    measured_test("a capture in kept work", capture_in_kept_work);
}

/// The environment variable of this binary's child process (one test alone in a process: a
/// thread's exit is in question, and its thread-local destructors).
const CHILD: &str = "UM_CAPTURE_FREES_CHILD";

/// A value kept in a `thread_local!` whose destructor, at thread exit, captures one launch and
/// drops a host-owned mirrored buffer (32 MiB on the device) in the capture closure: the
/// buffer must be freed (or the capture refused, and the buffer freed at once).
struct CapturesAtExit {
    name: &'static str,
    ctx: Context,
    held: Option<Managed<[f32], HostOwned, um::Mirror>>,
}

impl Drop for CapturesAtExit {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        let r = Managed::from_slice(&self.ctx, &[0.0f32; 256]).and_then(|x| {
            self.ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                    add_scalar(cap, &mut x, 1.0)?;
                    drop(held);
                    Ok(((x,), ()))
                })?;
                graph.launch(s)?;
                let (x,) = graph.sync()?;
                Ok(x[0])
            })
        });
        println!(
            "{}: a capture in its thread-local destructor: {r:?}",
            self.name
        );
    }
}

thread_local! {
    static AT_EXIT_BEFORE: std::cell::RefCell<Option<CapturesAtExit>> =
        const { std::cell::RefCell::new(None) };
    static AT_EXIT_INSIDE: std::cell::RefCell<Option<CapturesAtExit>> =
        const { std::cell::RefCell::new(None) };
    static AT_EXIT_AFTER: std::cell::RefCell<Option<CapturesAtExit>> =
        const { std::cell::RefCell::new(None) };
}

/// A thread with three [`CapturesAtExit`]: set up before its first capture, inside that
/// capture's closure, and after it. um's two records of a thread's captures (the scopes', used
/// first when a capture begins; the kept work's, used first when it ends) are destroyed at thread
/// exit in the reverse order of their first use (glibc), so the value set up inside the first
/// closure is destroyed between them: a capture may still begin there (the scopes' record is
/// there), but what its closure keeps for its end has nowhere to go. Whatever the order, every
/// buffer must be freed: each half of the three buffers, watched before the thread began, is
/// gone from the driver once the thread has ended. (The device's free memory is printed, not
/// compared: other processes on the device, or the test binary's own, move it too.)
#[test]
#[ignore = "needs a CUDA device"]
fn what_a_capture_begun_in_a_thread_local_destructor_drops_is_freed() {
    let _serial = crate::common::serial();
    let name = "what_a_capture_begun_in_a_thread_local_destructor_drops_is_freed";
    if std::env::var_os(CHILD).is_none() {
        let (status, text) = common::child_output(name, CHILD);
        assert!(
            status.success() && text.contains("1 passed"),
            "the child failed ({status})"
        );
        return;
    }
    let Some(ctx) = common::device_for_captures() else {
        return;
    };
    let _dog = common::watchdog("captures in thread-local destructors");
    common::capture_once(&ctx).expect("a capture");
    settle(&ctx);
    let before = free_memory(&ctx);
    // The three buffers the thread's destructors drop, both halves of each watched, made here so
    // that the thread does nothing before its values are set but what the test is about.
    let mut held: Vec<_> = (0..3)
        .map(|_| {
            let h = Managed::from_fn_mirrored(&ctx, len(), |_| 1.0f32).expect("alloc");
            ctx.with_stream(StreamOptions::new(), |s| watched_mirror(s, h))
                .expect("watched")
        })
        .collect();
    let thread_ctx = ctx.clone();
    std::thread::spawn(move || {
        let ctx = thread_ctx;
        let mut value = |name| CapturesAtExit {
            name,
            ctx: ctx.clone(),
            held: held.pop(),
        };
        AT_EXIT_BEFORE.with(|v| *v.borrow_mut() = Some(value("before")));
        let inside = value("inside");
        let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
        ctx.with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                AT_EXIT_INSIDE.with(|v| *v.borrow_mut() = Some(inside));
                Ok(((x,), ()))
            })?;
            graph.sync().map(drop)
        })
        .expect("the thread's first capture");
        AT_EXIT_AFTER.with(|v| *v.borrow_mut() = Some(value("after")));
    })
    .join()
    .expect("the thread ended without a panic");
    // Settled, and given the time free memory takes to come back (the reaper's frees).
    let after = free_after(&ctx, before);
    println!(
        "free {:.1} MiB before the thread, {:.1} MiB after its end",
        before as f64 / (1 << 20) as f64,
        after as f64 / (1 << 20) as f64
    );
    common::assert_context_usable(&ctx);
    let (watched, lost) = still_allocated();
    assert_eq!(watched, 6, "both halves of three buffers watched");
    assert!(
        lost.is_empty(),
        "{} of {watched} allocations never freed: a buffer dropped inside a capture begun in a \
         thread-local destructor {lost:x?}",
        lost.len()
    );
}

/// A communicator's waits inside a capture closure, `Comm::wait` and a group's
/// `Launched::wait` after an all-reduce enqueued before the capture: each is refused on the
/// capturing thread (`Error::InsideCapture`: the driver would refuse the stream queries) with
/// nothing aborted and no stream poisoned, and the capture, whose closure goes on, stays valid.
/// After the capture the communicator waits as usual, the all-reduce's result is right, and no
/// memory is lost (the buffer of the collective is freed, not leaked as a poisoned stream's).
fn waits_refused_in_a_capture(ctx: &Context) -> Result<(), String> {
    let options = um::nccl::CommOptions::new();
    let Some(comm) = common::one_rank_comm(ctx, options) else {
        return Ok(());
    };
    let x = Managed::from_slice(ctx, &[0.0f32; 256]).map_err(text)?;
    let y = Managed::from_fn_mirrored(ctx, len(), |_| 1.0f32).map_err(text)?;
    let came = ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let mut y = y.attach(s)?;
        let mut z = Managed::from_fn_mirrored(ctx, len(), |_| 2.0f32)?.attach(s)?;
        comm.all_reduce_in_place(s, &mut y, um::nccl::ReduceOp::Sum)?;
        let mut group = um::nccl::Group::new();
        group.all_reduce_in_place(&comm, s, &mut z, um::nccl::ReduceOp::Sum)?;
        let launched = group.launch()?;
        let mut seen = Vec::new();
        let captured = s.capture((x,), |cap, (mut x,)| {
            add_scalar(cap, &mut x, 1.0)?;
            seen.push(comm.wait(s, Duration::from_secs(20)));
            seen.push(launched.wait(Duration::from_secs(20)));
            add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        });
        let mut wrong = Vec::new();
        for waited in &seen {
            if !matches!(waited, Err(Error::InsideCapture { .. })) {
                wrong.push(format!("a wait in the closure came to {waited:?}"));
            }
        }
        if comm.is_aborted() {
            wrong.push("the communicator was aborted".to_owned());
        }
        if s.is_poisoned() {
            wrong.push("the stream was poisoned".to_owned());
        }
        if let Err(e) = comm.wait(s, Duration::from_secs(20)) {
            wrong.push(format!("the wait after the capture: {e}"));
        }
        let (y, z) = s.sync_all((y, z))?;
        if let Some(i) = y.iter().position(|v| *v != 1.0) {
            wrong.push(format!("all-reduce: element {i} is {}", y[i]));
        }
        if let Some(i) = z.iter().position(|v| *v != 2.0) {
            wrong.push(format!("group all-reduce: element {i} is {}", z[i]));
        }
        match replay(s, captured) {
            Came::Valid => {}
            came => wrong.push(format!("the capture: {came:?}")),
        }
        Ok(if wrong.is_empty() {
            Ok(())
        } else {
            Err(wrong.join("; "))
        })
    });
    drop(comm);
    came.unwrap_or_else(|e| Err(format!("the stream scope: {e}")))
}

/// Waits of a communicator (one rank) inside a capture closure are refused without an abort
/// or a poisoned stream: see [`waits_refused_in_a_capture`].
#[test]
#[ignore = "needs a CUDA device"]
fn a_communicators_waits_inside_a_capture_closure_are_refused_and_abort_nothing() {
    let _serial = crate::common::serial();
    measured_test(
        "a communicator's waits in a capture",
        waits_refused_in_a_capture,
    );
}
