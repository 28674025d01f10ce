//! Helpers shared by the GPU tests.
#![allow(dead_code, unreachable_pub)]

use std::process::Command;

pub mod waker;

use um::Context;

/// The context of device 0. GPU tests are `#[ignore = "needs a CUDA device"]`; run without a
/// device (`--include-ignored` on a machine without one) they fail here, saying why: a missing
/// GPU never makes a GPU test pass.
pub fn gpu() -> Context {
    match Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) => panic!("this test needs a CUDA device: {e}"),
    }
}

/// Whether `UM_SANITIZE` is set: the GPU run script's sanitizer mode, under which every kernel
/// runs orders of magnitude slower.
pub fn under_sanitizer() -> bool {
    std::env::var_os("UM_SANITIZE").is_some()
}

/// Polls `fut` once, with a waker that does nothing.
pub fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> std::task::Poll<F::Output> {
    std::pin::Pin::new(fut).poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

/// `full`, or `small` under a sanitizer ([`under_sanitizer`]).
pub fn workload(full: usize, small: usize) -> usize {
    if under_sanitizer() { small } else { full }
}

/// Whether free device memory can show a leak: not under a sanitizer (`UM_SANITIZE`), where the
/// buffers are 4 MiB and the tool allocates device memory of its own. Measured: the leak
/// checks' controls (a held buffer must show in free memory) failed under memcheck, in
/// `gpu_coherent` and in `gpu_async`. Says so when it cannot.
pub fn counts_free_memory() -> bool {
    let counts = !under_sanitizer();
    if !counts {
        println!("UM_SANITIZE: free memory not compared");
    }
    counts
}

/// The contents of a host-owned buffer of any storage, for the tests that run over every storage
/// and check only what a kernel left: read in place where the storage has a host side
/// ([`um::HostVisible`]), copied out for device memory (`to_vec`, a copy that waits).
pub trait Contents: um::Storage {
    /// The buffer's elements, on the host.
    fn contents<T: um::DeviceCopy>(buf: &um::Managed<[T], um::HostOwned, Self>) -> Vec<T>;
}

macro_rules! contents_in_place {
    ($($m:ty),+) => {$(
        impl Contents for $m {
            fn contents<T: um::DeviceCopy>(buf: &um::Managed<[T], um::HostOwned, Self>) -> Vec<T> {
                buf.iter().copied().collect()
            }
        }
    )+};
}

contents_in_place!(um::Unified, um::Coherent, um::Mirror);

impl Contents for um::Device {
    #[allow(clippy::expect_used)] // a test helper stops at the first surprise, like the tests
    fn contents<T: um::DeviceCopy>(buf: &um::Managed<[T], um::HostOwned, Self>) -> Vec<T> {
        buf.to_vec().expect("copy a device buffer to the host")
    }
}

/// A host-owned buffer of floats in storage `M`, or the error that refused it.
pub type Floats<M> = um::Result<um::Managed<[f32], um::HostOwned, M>>;

/// How a test allocates buffers of one storage: a copy of a slice, and zeroed.
pub struct Alloc<M: um::Storage> {
    pub from_slice: fn(&Context, &[f32]) -> Floats<M>,
    pub zeroed: fn(&Context, usize) -> Floats<M>,
}

/// Seed 000's loop (transform on the GPU, a pass on the host, convert on the GPU, five times)
/// in buffers of storage `M`, checked element by element against the CPU; then a host write
/// after `sync` must reach a kernel on another stream. Shared by the storages' GPU tests.
#[allow(clippy::expect_used)] // a test helper stops at the first surprise, like the tests
pub fn seed_loop_matches_the_cpu<M: um::HostVisible>(ctx: &Context, alloc: Alloc<M>) {
    use um::StreamOptions;
    use um::kernels::run_task;
    use um_test_kernels::testing::add_scalar;
    let n = workload(1 << 20, 4097) + 3;
    let input: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.25).collect();
    let (mut data_cpu, mut out_cpu) = (vec![0.0f32; n], vec![0.0f32; n]);
    let inp = (alloc.from_slice)(ctx, &input).expect("alloc input");
    let mut data = (alloc.zeroed)(ctx, n).expect("alloc data");
    let out = (alloc.zeroed)(ctx, n).expect("alloc out");
    let (inp, mut data, out) = ctx
        .with_stream(StreamOptions::new(), |s| {
            let (inp, mut out) = (inp.attach(s)?, out.attach(s)?);
            for _ in 0..5 {
                let mut dev = data.attach(s)?;
                run_task::transform(s, &inp, &mut dev)?;
                let mut host = dev.sync()?;
                host.iter_mut().for_each(|v| *v -= 1.0);
                data = host;
                let dev = data.attach(s)?;
                run_task::convert(s, &mut out, &dev)?;
                data = dev.sync()?;
            }
            let (inp, out) = s.sync_all((inp, out))?;
            Ok((inp, data, out))
        })
        .expect("stream work");
    for _ in 0..5 {
        for i in 0..n {
            data_cpu[i] = 2.0 * input[i] + data_cpu[i] - 1.0;
            out_cpu[i] = 0.5 * data_cpu[i];
        }
    }
    assert_eq!(&*inp, &input[..], "the kernels only read the input");
    assert_eq!(&*data, &data_cpu[..]);
    assert_eq!(&*out, &out_cpu[..]);
    // A host write after `sync` reaches the next kernel, on another stream.
    data[7] = 100.0;
    let data = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut d = data.attach(s)?;
            add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("second stream");
    assert_eq!(data[7], 101.0);
    assert_eq!(data[8], data_cpu[8] + 1.0);
}

/// Three rounds of kernel (`v + 1`) then host pass (`2v`) over `data` (which holds `v = i`) on
/// a stream with `transfer`: each element ends at `8i + 14`, which is checked. Shared by the
/// transfer-policy tests of the normal and the emulated no-concurrent-access mode.
#[allow(clippy::expect_used)] // a test helper stops at the first surprise, like the tests
pub fn three_rounds_with(
    ctx: &Context,
    data: um::Managed<[f32]>,
    transfer: um::Transfer,
) -> um::Managed<[f32]> {
    use um::StreamOptions;
    use um_test_kernels::testing::add_scalar;
    let data = ctx
        .with_stream(StreamOptions::new().transfer(transfer), |s| {
            let mut d = data.attach(s)?;
            for _ in 0..3 {
                add_scalar(s, &mut d, 1.0)?;
                let mut h = d.sync()?;
                h.iter_mut().for_each(|v| *v *= 2.0);
                d = h.attach(s)?;
            }
            d.sync()
        })
        .expect("stream work");
    assert!(
        data.iter()
            .enumerate()
            .all(|(i, v)| *v == 8.0 * i as f32 + 14.0)
    );
    data
}

/// Checks that `ctx` still runs work: a fresh buffer, one kernel, one wait, the right result.
/// After a test that dropped memory with work in flight, this is what shows that nothing was
/// freed under a running kernel: a use-after-free on the GPU is a sticky error, and every later
/// call on the context would fail.
#[allow(clippy::expect_used)] // a test helper stops at the first surprise, like the tests
pub fn assert_context_usable(ctx: &Context) {
    use um::StreamOptions;
    use um_test_kernels::testing::add_scalar;
    let probe = um::Managed::from_fn(ctx, 8, |_| 1.0f32).expect("alloc after");
    let probe = ctx
        .with_stream(StreamOptions::new(), |s| {
            let mut p = probe.attach(s)?;
            add_scalar(s, &mut p, 1.0)?;
            p.sync()
        })
        .expect("context still usable");
    assert!(probe.iter().all(|v| *v == 2.0), "the probe kernel ran");
}

/// The environment variable that marks the child process of a fault test. A fault leaves the
/// CUDA context unusable for the rest of the process, so each fault test re-runs itself alone
/// in a child ([`run_in_child`]) and makes the fault happen there.
pub const FAULT_CHILD: &str = "UM_FAULT_CHILD";

/// Whether this process is a fault test's child (see [`FAULT_CHILD`]).
pub fn is_fault_child() -> bool {
    std::env::var_os(FAULT_CHILD).is_some()
}

/// PTX of `trap_kernel(ptr)`, a kernel that traps at once: a fault for the child of a fault
/// test. Launched only through the `unsafe` `Stream::launch`, whose contract it breaks on
/// purpose; it is not in kernels-ptx/, where a kernel gets a safe launcher.
pub const TRAP_PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry trap_kernel(.param .u64 trap_kernel_param_0)
{
	trap;
	ret;
}
"#;

/// The harness's name of this binary's test `name`: `<module>::<name>` where the binary holds
/// its tests in modules (`tests/gpu/main.rs`), asked of the binary itself (`--list`); `name`
/// where it already is a path.
#[allow(clippy::expect_used)] // a test helper stops at the first surprise, like the tests
pub fn test_path(name: &str) -> String {
    if name.contains("::") {
        return name.to_owned();
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args(["--list", "--include-ignored"])
        .output()
        .expect("list the tests");
    let list = String::from_utf8_lossy(&out.stdout);
    let found: Vec<&str> = list
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|path| *path == name || path.ends_with(&format!("::{name}")))
        .collect();
    match found.as_slice() {
        [one] => (*one).to_owned(),
        _ => panic!("not one test of this binary is named {name}: {found:?}"),
    }
}

/// Runs `test` alone in a child process (this test binary, `var` set to 1), prints the
/// child's output, and returns its exit status and output.
#[allow(clippy::expect_used)] // a test helper stops at the first surprise, like the tests
pub fn child_output(test: &str, var: &str) -> (std::process::ExitStatus, String) {
    let test = test_path(test);
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([
            test.as_str(),
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(var, "1")
        .output()
        .expect("run the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("--- child output ---\n{text}--- end ---");
    (out.status, text)
}

/// The parent half of a fault test: runs `test` alone in a child process (this test binary,
/// [`FAULT_CHILD`] set), prints the child's output, checks that the child ran that one test,
/// passed, reported its fault (`fault reported: `) and got through every drop (`every drop
/// returned`), and returns the output for the caller's own checks.
pub fn run_in_child(test: &str) -> String {
    let (status, text) = child_output(test, FAULT_CHILD);
    assert!(status.success(), "the child failed: {status}");
    assert!(text.contains("1 passed"), "the child did not run the test");
    assert!(
        text.contains("fault reported: "),
        "the child reported no fault"
    );
    assert!(
        text.contains("every drop returned"),
        "a drop did not return"
    );
    text
}

/// A second handle of device 0 with one module loaded (a typed launcher ran through it).
#[allow(clippy::expect_used)] // a test helper stops at the first surprise, like the tests
pub fn handle_with_a_module() -> Context {
    use um::{Managed, StreamOptions};
    let ctx = Context::new(0).expect("device 0");
    let y = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut y = y.attach(s)?;
        um_test_kernels::testing::add_scalar(s, &mut y, 1.0)?;
        s.sync_all((y,)).map(drop)
    })
    .expect("load a module through it");
    assert!(ctx.cache_stats().0 >= 1, "a module is loaded");
    ctx
}

/// Aborts the process, saying `what`, unless the returned sender is sent to within 60 s (240 s
/// under a sanitizer, `UM_SANITIZE`, which slows every CUDA call): a deadlock test fails
/// instead of hanging. A test that panics first drops the sender; the
/// watchdog then stops quietly, and the harness reports the panic (a first GPU run of the
/// idle-section tests aborted here on a failed assertion, and its message was lost). The message
/// goes to the process's stderr directly, past the harness's output capture, which an abort
/// would discard.
pub fn watchdog(what: &'static str) -> std::sync::mpsc::Sender<()> {
    watchdog_after(what, if under_sanitizer() { 240 } else { 60 })
}

/// [`watchdog`] with a limit of `seconds` everywhere, under a sanitizer too: for a test whose
/// own work is a few seconds of GPU time at any speed, so that a hang costs a sanitizer part no
/// more than a plain run.
pub fn watchdog_after(what: &'static str, seconds: u64) -> std::sync::mpsc::Sender<()> {
    use std::sync::mpsc::RecvTimeoutError;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) =
            rx.recv_timeout(std::time::Duration::from_secs(seconds))
        {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "deadlock: {what}");
            std::process::abort();
        }
    });
    tx
}

/// One test of the binary at a time: every GPU test takes this lock first. Several measure the
/// device's free memory or time a wait (another test's allocations and device-wide waits would
/// disturb them), one switches um's waits to the event thread process-wide, and the tests of
/// `Context::with_idle_unless_capturing` expect no other test's capture on the device (the
/// harness runs a binary's tests on parallel threads). Reentrant on one thread: a helper that a
/// test calls may take it again. A thread the test starts must not take it (it would wait for
/// the test).
pub fn serial() -> Serial {
    use std::cell::Cell;
    thread_local! {
        static HELD: Cell<usize> = const { Cell::new(0) };
    }
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let depth = HELD.with(Cell::get);
    let guard = (depth == 0).then(|| {
        LOCK.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    });
    HELD.with(|h| h.set(depth + 1));
    Serial {
        _guard: guard,
        release: || HELD.with(|h| h.set(h.get().saturating_sub(1))),
    }
}

/// um's waits go through the event thread (`um_core::use_event_thread_for_waits`, a switch of
/// the whole process) until the returned guard is dropped, also where the test panics first:
/// the binary's later tests, of every module, run with the default mechanism. Take it after
/// [`serial`].
pub fn event_thread_for_waits() -> EventThreadWaits {
    um_core::use_event_thread_for_waits(true);
    EventThreadWaits(())
}

/// The switch of [`event_thread_for_waits`], turned back off when dropped.
pub struct EventThreadWaits(());

impl Drop for EventThreadWaits {
    fn drop(&mut self) {
        um_core::use_event_thread_for_waits(false);
    }
}

/// The binary's lock, held until dropped ([`serial`]).
pub struct Serial {
    _guard: Option<std::sync::MutexGuard<'static, ()>>,
    release: fn(),
}

impl Drop for Serial {
    fn drop(&mut self) {
        (self.release)();
        // On the CPU model, a test fails on any violation of um's rules the model saw, also one
        // on another thread (the reaper, a driver thread) that could not panic in the test.
        #[cfg(feature = "model")]
        if !std::thread::panicking() {
            let seen = um_core::model::take_violations();
            assert!(seen.is_empty(), "the CPU model saw violations: {seen:#?}");
        }
    }
}

/// Whether the tests run on um-core's CPU model of the driver (`--features model`) instead of a
/// GPU.
pub fn on_model() -> bool {
    cfg!(feature = "model")
}

/// On the CPU model, says that `what` needs a real device or library and returns true: the
/// test returns early there (a test that measures hardware, times work, or calls cuBLAS, NCCL,
/// cuRAND, cuSPARSE or libcuda directly).
pub fn skip_on_model(what: &str) -> bool {
    if on_model() {
        println!("skipped on the CPU model: {what}");
    }
    on_model()
}

/// One capture of one launch (`x += 1` on 256 zeros) on a fresh stream of `ctx`, replayed
/// once and checked.
pub fn capture_once(ctx: &Context) -> um::Result<()> {
    use um::{Managed, StreamOptions};
    let x = Managed::from_slice(ctx, &[0.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            um_test_kernels::testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        graph.launch(s)?;
        let (x,) = graph.sync()?;
        assert!(x.iter().all(|v| *v == 1.0));
        Ok(())
    })
}

/// Device 0, where captures of unified memory can be made (concurrent managed access); `None`,
/// saying so, elsewhere (the test is then skipped).
pub fn device_for_captures() -> Option<Context> {
    let ctx = gpu();
    if !ctx.info().concurrent_managed_access {
        eprintln!("skipped: captures of unified memory need concurrent managed access");
        return None;
    }
    Some(ctx)
}

/// A communicator of one rank on `ctx` (NCCL is loaded at run time), or `None`, said, where
/// NCCL is not installed (`Error::NcclUnavailable`): the tests of a communicator's drop and
/// abort need one rank only. Any other failure stops the test: a creation that timed out (NCCL
/// loads its kernels during creation, 17 s under memcheck on an H100) is a failure to see, not a
/// reason to skip, and NCCL's abort of an unfinished creation leaks 4 bytes of pinned memory
/// that memcheck would then report against the test.
pub fn one_rank_comm(ctx: &Context, options: um::nccl::CommOptions) -> Option<um::nccl::Comm> {
    match um::nccl::Comm::init_all(std::slice::from_ref(ctx), options) {
        Ok(mut comms) => comms.pop(),
        Err(e @ um::Error::NcclUnavailable { .. }) => {
            eprintln!("skipped: no one-rank communicator ({e})");
            None
        }
        Err(e) => panic!("a one-rank communicator could not be made: {e}"),
    }
}

/// Waits until a capture of `um` waits to begin on `ctx`'s device (another thread's, held off
/// by a hold or an idle section): `true` once one does, `false` if none did within 50 s (200 s
/// under a sanitizer): a bound for a failing test, inside the watchdog's, not a latency goal.
pub fn until_a_capture_waits(ctx: &Context) -> bool {
    let limit = std::time::Duration::from_secs(if under_sanitizer() { 200 } else { 50 });
    let began = std::time::Instant::now();
    while um_core::capture_counts(ctx).waiting == 0 {
        if began.elapsed() > limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    true
}

/// A capture of one `add_scalar` on a stream of its own, asked for once `go` says so (or its
/// sender is gone): `began` is set inside the capture closure, so only once the capture has
/// begun. `Ok(true)` where the graph replayed right.
pub fn capture_when_told(
    ctx: &Context,
    go: &std::sync::mpsc::Receiver<()>,
    began: &std::sync::atomic::AtomicBool,
) -> um::Result<bool> {
    use um::{Managed, StreamOptions};
    let x = Managed::from_slice(ctx, &[0.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let _ = go.recv();
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            began.store(true, std::sync::atomic::Ordering::SeqCst);
            um_test_kernels::testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        graph.launch(s)?;
        let (x,) = graph.sync()?;
        Ok(x.iter().all(|v| *v == 1.0))
    })
}

/// Runs `f` on this thread while another thread holds a capture of `um` open on `ctx`'s
/// device: that capture records one `add_scalar` on device memory (which enters a graph with or
/// without concurrent managed access), waits inside its closure until `f` has returned, records
/// a second, then replays the graph. `f`'s result, and `Ok(true)` where the graph replayed both
/// kernels.
#[allow(clippy::expect_used)] // a test helper stops at the first surprise, like the tests
pub fn beside_an_open_capture<R>(ctx: &Context, f: impl FnOnce() -> R) -> (R, um::Result<bool>) {
    use um::{Managed, StreamOptions};
    use um_test_kernels::testing::add_scalar;
    let (began_tx, began) = std::sync::mpsc::channel::<()>();
    let (done, done_rx) = std::sync::mpsc::channel::<()>();
    let capturing = {
        let ctx = ctx.clone();
        std::thread::spawn(move || -> um::Result<bool> {
            let x = Managed::from_slice_device(&ctx, &[0.0f32; 256])?;
            ctx.with_stream(StreamOptions::new(), |s| {
                let x = x.attach(s)?;
                let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                    add_scalar(cap, &mut x, 1.0)?;
                    let _ = began_tx.send(());
                    let _ = done_rx.recv();
                    add_scalar(cap, &mut x, 1.0)?;
                    Ok(((x,), ()))
                })?;
                graph.launch(s)?;
                let (x,) = graph.sync()?;
                Ok(x.to_vec()?.iter().all(|v| *v == 2.0))
            })
        })
    };
    began.recv().expect("the capture began");
    let out = f();
    let _ = done.send(());
    (out, capturing.join().expect("the capturing thread"))
}

/// The driver's range of the allocation that holds `address`: `None` where it knows none.
pub fn allocation_at(address: u64) -> Option<(u64, usize)> {
    let (mut start, mut size) = (0u64, 0usize);
    // SAFETY: each call writes one value of the attribute's type (a device pointer, a size_t)
    // to a local of that type, and reads nothing but the driver's table.
    let found = unsafe {
        cust::sys::cuPointerGetAttribute(
            std::ptr::from_mut(&mut start).cast(),
            cust::sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            address,
        ) == cust::sys::CUresult::CUDA_SUCCESS
            && cust::sys::cuPointerGetAttribute(
                std::ptr::from_mut(&mut size).cast(),
                cust::sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                address,
            ) == cust::sys::CUresult::CUDA_SUCCESS
    };
    found.then_some((start, size))
}
