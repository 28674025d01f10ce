//! The CUDA context: driver initialisation, device choice, and what the device can do.

use std::sync::{Arc, Mutex, OnceLock};

use crate::driver;
use crate::driver::capture_count::{CaptureCount, Quiet, Settle};
use crate::driver::module::ModuleCache;
use crate::driver::options::ContextOptions;
use crate::driver::sys;
use crate::error::{Error, Result};

/// What `um` needs to know about the device, read once when the context is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's ordinal.
    pub ordinal: usize,
    /// The device's name, for example `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability as `(major, minor)`.
    pub compute_capability: (i32, i32),
    /// Number of streaming multiprocessors.
    pub multiprocessors: u32,
    /// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`: whether the CPU and GPU may touch
    /// managed memory at the same time. Where it is `false` (Windows, WSL, Jetson, pre-Pascal
    /// GPUs), a CPU access to managed memory that a running kernel may see is a segmentation
    /// fault; `um` then re-attaches memory to the host whenever it returns to the host state
    /// (see [`docs/design.md`](https://github.com/um-rs/um/blob/main/docs/design.md)).
    ///
    /// `false` also where the context emulates such a device
    /// ([`ContextOptions::emulate_no_concurrent_access`]); `um` reads only this field to choose
    /// its path, so the emulation takes every path a real device without concurrent access does.
    pub concurrent_managed_access: bool,
    /// Whether the context was opened to behave as if the device lacked concurrent managed
    /// access ([`ContextOptions::emulate_no_concurrent_access`], or
    /// `UM_EMULATE_NO_CONCURRENT_ACCESS=1` for [`Context::new`]). `concurrent_managed_access` is
    /// then `false` whatever the device reports.
    pub emulated_no_concurrent_access: bool,
    /// `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS`: whether the GPU can read ordinary pageable
    /// host memory. `um` only attaches managed allocations, so this is informational.
    pub pageable_memory_access: bool,
    /// The CUDA version the driver implements, as `(major, minor)`.
    pub driver_version: (i32, i32),
}

/// A device's primary context, made current on whichever thread uses it.
///
/// Cloning is cheap (a reference count); every clone names the same context. All of `um`'s
/// calls make the context current on the calling thread first, so a `Context` may be used from
/// any thread.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    /// Whether allocations may exceed the GPU's free memory (`allow_oversubscription`).
    oversubscribe: std::sync::atomic::AtomicBool,
    /// Unique for the life of the process, never reused (unlike addresses): per-thread caches
    /// key on it, so an entry of a dropped context can never match a new one.
    id: u64,
    /// The id of the legacy default stream seen through this handle (see `RawStream`'s
    /// identity invariant): one NULL stream per context.
    legacy_stream: u64,
    raw: sys::CUcontext,
    device: sys::CUdevice,
    info: DeviceInfo,
    modules: Mutex<ModuleCache>,
    /// What every handle of the device shares: the retain of its primary context, and the
    /// modules of dropped handles that wait for the device's captures to end.
    shared: Arc<Shared>,
}

/// One device's primary context, shared by every `Context` handle of it that is alive.
///
/// Unloading a module needs the device's work to be done first (a kernel of it may still run),
/// and that wait (`cuCtxSynchronize`) invalidates a stream capture that another thread has in
/// progress on the context, whichever handle began it (driver 580). So a handle dropped while a
/// capture of `um` is open on the device leaves its modules here, and they are unloaded when
/// the last such capture ends, or with the last handle. The lock is held across the wait, so no
/// capture can begin while it runs.
struct Shared {
    raw: sys::CUcontext,
    device: sys::CUdevice,
    /// The device's count of captures and idle sections, with the modules of dropped handles
    /// and the work kept for the end of its captures (`driver/capture_count.rs`).
    count: CaptureCount<ModuleCache, (Context, DeviceTask)>,
    /// Modules of handles dropped inside a driver callback (a waker's drop), where `quiet` may
    /// be held by a thread that waits for that very callback: kept here, under a lock that is
    /// never held across a wait, until a later retire, guard or the last handle takes them.
    deferred: Mutex<Vec<ModuleCache>>,
}

/// A piece of work kept for the end of a device's captures (`Quiet::tasks`).
type DeviceTask = Box<dyn FnOnce() + Send>;

// SAFETY: as for `Inner`: the handles are plain driver handles, usable from any thread; the
// mutable state is behind the Mutex.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// The `Shared` of each device with a live handle, by device. Only the entries of the device
/// asked for are upgraded under the lock: an `Arc` upgraded and dropped there could be the last
/// one, and a `Shared` dropped under this lock would take it again ([`release_dead`]).
static DEVICES: Mutex<Vec<(sys::CUdevice, std::sync::Weak<Shared>)>> = Mutex::new(Vec::new());

/// The registry of live `Shared`s, read through a poisoned lock (nothing under it panics
/// halfway through a change).
fn devices() -> std::sync::MutexGuard<'static, Vec<(sys::CUdevice, std::sync::Weak<Shared>)>> {
    let mut devices = DEVICES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    devices.retain(|(_, w)| w.strong_count() > 0);
    devices
}

/// The live `Shared` of `device` in the registry, if any (its entry alone is upgraded).
fn live_of(
    devices: &[(sys::CUdevice, std::sync::Weak<Shared>)],
    device: sys::CUdevice,
) -> Option<Arc<Shared>> {
    devices
        .iter()
        .filter(|(d, _)| *d == device)
        .find_map(|(_, w)| w.upgrade())
}

impl Shared {
    /// The device's shared state: the live one, or a new one that retains the primary context.
    fn of(device: sys::CUdevice) -> Result<Arc<Shared>> {
        let mut devices = devices();
        if let Some(live) = live_of(&devices, device) {
            return Ok(live);
        }
        let raw = driver::primary_ctx_retain(device)?;
        let shared = Shared::registered(&mut devices, raw, device);
        Ok(shared)
    }

    /// A new shared state of `device` that owns one retain of its primary context `raw` (the
    /// caller's), entered in the registry (whose lock the caller holds).
    fn registered(
        devices: &mut Vec<(sys::CUdevice, std::sync::Weak<Shared>)>,
        raw: sys::CUcontext,
        device: sys::CUdevice,
    ) -> Arc<Shared> {
        let shared = Arc::new(Shared {
            raw,
            device,
            count: CaptureCount::new(),
            deferred: Mutex::new(Vec::new()),
        });
        devices.push((device, Arc::downgrade(&shared)));
        shared
    }

    fn quiet(&self) -> crate::sync::MutexGuard<'_, Quiet<ModuleCache, (Context, DeviceTask)>> {
        self.count.quiet()
    }

    /// The modules of a dropped handle: unloaded now, or once the device's captures are over.
    fn retire(self: &Arc<Self>, modules: ModuleCache) {
        self.retire_all(vec![modules]);
    }

    /// [`retire`](Shared::retire) for several handles' modules (a dead `Shared`'s graves).
    fn retire_all(self: &Arc<Self>, mut modules: Vec<ModuleCache>) {
        if in_driver_callback() {
            // Another thread may hold `quiet` while it waits for the context, and so for this
            // callback: never block on it here.
            self.deferred().append(&mut modules);
            return;
        }
        let mut quiet = self.quiet();
        if quiet.captures == 0 && !thread_is_capturing() {
            // With any modules an earlier drop had to leave.
            let mut all = self.take_graves(&mut quiet);
            all.append(&mut modules);
            unload(self.raw, all);
        } else {
            quiet.graves.append(&mut modules);
            if quiet.captures == 0 {
                // Only this thread captures (on another device): the graves are unloaded on
                // this thread once its captures have ended.
                drop(quiet);
                self.settle_after_this_threads_captures();
            }
        }
    }

    /// Once no capture of `um` is in progress on the device, nor on the calling thread: unloads
    /// the graves, and runs the kept tasks ([`Quiet::tasks`]) inside an idle section (kept again
    /// if a capture began or waits meanwhile; its end settles them). Called where a capture
    /// ends and where a thread's last capture has ended; does nothing while one is in
    /// progress (its end calls it again) or inside a driver callback.
    fn settle(self: &Arc<Self>) {
        if in_driver_callback() {
            return;
        }
        let unload_graves = |quiet: &mut Quiet<_, _>| {
            let graves = self.take_graves(quiet);
            unload(self.raw, graves);
        };
        let tasks = match self.count.settle(thread_is_capturing(), unload_graves) {
            Settle::Busy => return,
            Settle::AfterThisThread => {
                self.settle_after_this_threads_captures();
                return;
            }
            Settle::Run(tasks) => tasks,
        };
        let Some((ctx, _)) = tasks.first() else {
            return;
        };
        let ctx = ctx.clone();
        // One wait for them all; a panic of one does not keep the others from running.
        let all: DeviceTask = Box::new(move || {
            for (_, task) in tasks {
                run_caught(task);
            }
        });
        // Should the wait fail (a sticky error), the tasks are dropped unrun: what they would
        // have released is leaked, never released under a kernel that may still run.
        let _ = ctx.idle_or_keep(all);
    }

    /// Settles the device on this thread once its last capture of `um` has ended.
    fn settle_after_this_threads_captures(self: &Arc<Self>) {
        let shared = Arc::clone(self);
        keep_for_capture_end(Box::new(move || shared.settle()));
    }

    fn deferred(&self) -> std::sync::MutexGuard<'_, Vec<ModuleCache>> {
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The graves and the modules deferred by driver callbacks, taken for unloading.
    fn take_graves(
        &self,
        quiet: &mut Quiet<ModuleCache, (Context, DeviceTask)>,
    ) -> Vec<ModuleCache> {
        let mut all = std::mem::take(&mut quiet.graves);
        all.append(&mut self.deferred());
        all
    }
}

/// Waits for the work of the context `raw`, then unloads `modules`; should the context not be
/// made current or the wait fail (a sticky error), they are leaked rather than unloaded under a
/// kernel. The caller holds the lock of the device's `quiet` with no capture of `um` counted
/// there nor on its thread (no capture of `um` is in progress on the device, and none begins
/// meanwhile: every one is counted under that lock first).
fn unload(raw: sys::CUcontext, modules: Vec<ModuleCache>) {
    if modules.is_empty() {
        return;
    }
    if driver::ctx_bind(raw).is_ok() && driver::ctx_synchronize().is_ok() {
        drop(modules);
    } else {
        std::mem::forget(modules);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Uncontended: every holder of the lock holds an `Arc` of this `Shared`.
        let graves = self.take_graves(&mut self.quiet());
        if in_driver_callback() {
            // The last handle of this device dropped inside a driver callback: the wait is
            // refused there, and so would be the release of the primary context, which
            // destroys it when um held the last retain. Both are
            // leaked: the modules and one retain of the device's primary context, which stays
            // alive until the process ends.
            std::mem::forget(graves);
            return;
        }
        let (raw, device) = (self.raw, self.device);
        // On a thread that is capturing (on another device), the wait would be refused and
        // would invalidate the capture: both wait for the end of the thread's captures (the
        // retain keeps the context alive until then).
        defer_while_capturing(move || release_dead(raw, device, graves));
    }
}

/// What a dropped `Shared` of `device` leaves, made where its thread may wait: the modules
/// `graves` unloaded after a wait for the device, and its retain of the primary context `raw`
/// released.
///
/// The wait must not meet a capture of `um` on the device (rules 187 and 197), and the dead
/// `Shared` no longer counts any: from the moment its last `Arc` went, another thread may have
/// made a new `Shared` of the device ([`Shared::of`]: the same primary context, since this
/// retain keeps it alive) and begun a capture there, which a wait made here would fail,
/// whether now or at the end of this thread's captures. So the graves are not unloaded here but
/// retired into the device's live `Shared` ([`Shared::retire_all`]): unloaded under its lock if
/// no capture is counted there, else kept in it until its last capture ends. Where no live one
/// is registered, this retain becomes a new registered `Shared` of the device first, under the
/// registry's lock: a handle made from then on shares it (its captures are counted where the
/// unload is decided), and one made before would have been found. Either way the wait is made
/// only under the lock of the one `Shared` in which every capture of `um` on the device is
/// counted, with none counted. The retain is released after that (a live `Shared` holds its
/// own, so the context stays; an adopted one releases it at its own drop, with no graves left).
fn release_dead(raw: sys::CUcontext, device: sys::CUdevice, graves: Vec<ModuleCache>) {
    if graves.is_empty() {
        // Nothing waits: the release alone (the last retain destroys the context, which no
        // registered `Shared` names any more; a new one retains it again, or a new context).
        driver::primary_ctx_release(device);
        return;
    }
    let mut devices = devices();
    match live_of(&devices, device) {
        Some(live) if live.raw == raw => {
            drop(devices);
            live.retire_all(graves);
            driver::primary_ctx_release(device);
        }
        Some(other) => {
            // A live `Shared` of another primary context of the device: cannot be while this
            // retain holds the context (only a device reset, which `Context::as_raw` forbids,
            // makes one). No `Shared` names `raw`, so no capture of `um` can be on it: unload.
            drop(devices);
            drop(other);
            unload(raw, graves);
            driver::primary_ctx_release(device);
        }
        None => {
            let heir = Shared::registered(&mut devices, raw, device);
            drop(devices);
            heir.retire_all(graves);
            // The last `Arc` unless a handle took it meanwhile: its drop releases the retain.
            drop(heir);
        }
    }
}

thread_local! {
    /// Captures of `um` in progress on this thread, on any device: the driver refuses waits on a
    /// capturing thread (thread-local mode) whichever context they are for.
    static THREAD_CAPTURES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether a capture of `um` is in progress on the calling thread.
#[inline]
pub(crate) fn thread_is_capturing() -> bool {
    THREAD_CAPTURES.with(std::cell::Cell::get) > 0
}

/// Counts a capture of `um` on the calling thread, from before `cuStreamBeginCapture`.
pub(crate) fn enter_thread_capture() {
    THREAD_CAPTURES.with(|n| n.set(n.get() + 1));
}

/// Uncounts it, after `cuStreamEndCapture`; whether that was the thread's last (the caller then
/// runs what was kept for it: [`run_after_captures`]).
pub(crate) fn leave_thread_capture() -> bool {
    THREAD_CAPTURES.with(|n| n.set(n.get().saturating_sub(1)));
    !thread_is_capturing()
}

thread_local! {
    /// What this thread kept while a capture of `um` was open on it ([`keep_for_capture_end`]):
    /// run on this thread once its last capture has ended. Read with `try_with`: it has a
    /// destructor, and is gone while the thread's later thread-local destructors run. A capture
    /// begins only while it is there ([`kept_work_recordable`], asked by
    /// `reclaim::defer::captures_recordable`, which `Scope::begin` checks).
    static AFTER_CAPTURES: std::cell::RefCell<Vec<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether this thread's record of the work kept for the end of its captures is there (first
/// used here, if it was not yet): false in a thread-local destructor that runs after it was
/// destroyed. A capture may begin only where this holds, so that what its closure keeps for its
/// end is kept, never forgotten.
///
/// Why that is enough: a thread's thread-local values are destroyed one at a time, each
/// destructor run to its end before the next begins, so a record that is there when a capture
/// begins (inside one destructor, or in ordinary code) is still there when that capture ends,
/// which is in the same call. The one exception, a thread that ends inside a capture closure
/// (`std::process::exit`), forgets what was kept (documented on [`defer_while_capturing`]).
pub(crate) fn kept_work_recordable() -> bool {
    AFTER_CAPTURES.try_with(|_| ()).is_ok()
}

/// Keeps `task` for the end of the calling thread's captures of `um` (it runs on this thread
/// once the last of them has ended). Where the thread's record is gone (a thread-local
/// destructor while the thread exits, inside a capture that began before the record went: only
/// a thread that ends inside a capture closure), the task is forgotten, neither run nor
/// dropped: what it would have released is leaked, and nothing it owns is dropped on a
/// capturing thread.
pub(crate) fn keep_for_capture_end(task: Box<dyn FnOnce()>) {
    let mut task = Some(task);
    let _ = AFTER_CAPTURES.try_with(|kept| kept.borrow_mut().extend(task.take()));
    if let Some(task) = task {
        std::mem::forget(task);
    }
}

/// Runs what the calling thread kept for the end of its captures, now that none is open; also
/// what those tasks keep in turn (none, unless one begins a capture of its own).
pub(crate) fn run_after_captures() {
    loop {
        let kept = AFTER_CAPTURES
            .try_with(|kept| std::mem::take(&mut *kept.borrow_mut()))
            .unwrap_or_default();
        if kept.is_empty() {
            return;
        }
        for task in kept {
            run_caught(task);
        }
    }
}

/// Runs `task`, and drops a panic of it: kept work runs inside um's own bookkeeping (the end of
/// a capture, a drop), which must go on whatever one task does.
fn run_caught<F: FnOnce()>(task: F) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
}

/// Whether a capture of `um` is open on the calling thread: inside the closure of
/// [`Stream::capture`](crate::Stream::capture) (or of `capture_streams`), and in what runs
/// there (a drop, a thread-local destructor of a thread that exits inside the closure). There
/// the driver refuses frees, waits and most other calls that are not part of the capture (and
/// such a refusal invalidates the capture): a library's destructor asks this first, and defers
/// its work with [`defer_while_capturing`].
pub fn capturing_on_this_thread() -> bool {
    thread_is_capturing()
}

/// Runs `f` now, unless a capture of `um` is open on the calling thread
/// ([`capturing_on_this_thread`]): then keeps it, and runs it on this thread as soon as the
/// last capture of `um` open on it has ended (right after its `cuStreamEndCapture`, inside
/// [`Stream::capture`](crate::Stream::capture)). Whether `f` ran now.
///
/// For a destructor that frees or waits (a communicator's teardown): run on a capturing
/// thread, those calls are refused, so what they would free is lost and the capture fails.
/// Kept, they run where they may. A panic of `f` run later is caught and dropped. Where the
/// thread exits inside the capture closure (`std::process::exit`), `f` is forgotten, neither
/// run nor dropped.
///
/// Only this thread's captures are waited for: in the thread-local mode `um` captures in,
/// other threads' captures do not restrict this thread's calls, except a wait for the whole
/// device (see [`Context::with_idle_after_captures`] for that).
pub fn defer_while_capturing(f: impl FnOnce() + 'static) -> bool {
    if !thread_is_capturing() {
        f();
        return true;
    }
    keep_for_capture_end(Box::new(f));
    false
}

/// Runs `f` with the calling thread's stream-capture mode relaxed while a capture of `um` is in
/// progress on this thread (inside the closure of [`Stream::capture`](crate::Stream::capture)),
/// and restores the mode afterwards, also when `f` panics; elsewhere it runs `f` as it is,
/// with no driver call. `Err` only where the driver refuses to change the mode (then `f` did
/// not run).
///
/// For a call of another library on an eager stream inside a capture closure that may load a
/// module (cuBLAS's first use of one of its kernels, which it loads lazily): a module load in
/// the thread-local mode `um` captures in invalidates the capture, and with the mode relaxed
/// it does not (rule 182; `um`'s own launches relax it the same way). `um-cublas` wraps its
/// calls in it.
///
/// Relaxed mode lets through, on this thread, the other calls that thread-local mode refuses
/// during a capture: allocations, frees, and waits. Inside `f` they do what any other thread may
/// do during the capture anyway (`um` captures in thread-local mode, which restricts the
/// capturing thread only), or fail as the driver decides. `um` never relies on those refusals:
/// what a capturing thread frees or waits for, `um` decides from its own record of captures, not
/// from the driver's answer. Nothing `um` frees is freed on a capturing thread, relaxed or not
/// ("every free is deferred, never dropped, while a capture may refuse it": [`docs/safety.md`](https://github.com/um-rs/um/blob/main/docs/safety.md)):
/// a stream-owned buffer dropped there is never freed or waited for (rule 187; one in the
/// capture is freed after it, rule 181); a host-owned one is freed on this thread once the
/// capture has ended (no GPU work uses host-owned memory); a `Blas` or `Context` handle, a
/// graph, a stream or an event dropped there waits for nothing, and is destroyed once the
/// capture has ended (rules 146, 187, 197). What does wait for the whole device,
/// [`Context::wait_idle`], fails a capture in progress on any thread with an `Err`, relaxed or
/// not (rule 187); whether the driver refuses it before or after waiting is its own affair.
/// The capture streams are not [`Eager`](crate::Eager), so no wait or `sync` of one compiles.
/// So this function is safe.
#[inline]
pub fn relaxed_while_capturing<R>(f: impl FnOnce() -> R) -> Result<R> {
    if !thread_is_capturing() {
        return Ok(f());
    }
    let _relaxed = driver::RelaxedCapture::enter()?;
    Ok(f())
}

thread_local! {
    /// Set while this thread runs code inside one of um's driver callbacks (the user's waker,
    /// on the driver's callback thread): no CUDA call is allowed there, and a wait for the
    /// context would wait for the callback itself.
    static IN_DRIVER_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is inside one of um's driver callbacks.
#[inline]
pub(crate) fn in_driver_callback() -> bool {
    IN_DRIVER_CALLBACK.with(std::cell::Cell::get)
}

/// How deeply idle sections may nest on one thread (a deeper one is refused with `Ok(None)`).
const MAX_NESTED_SECTIONS: usize = 16;

thread_local! {
    /// The devices (their `Shared`, by address) of the idle sections whose closures this thread
    /// runs ([`Context::with_idle_unless_capturing`]), outermost first, `IDLE_DEPTH` of them: a
    /// capture of one of them begun here would wait for that closure. Plain `Cell`s, with no
    /// destructor: a thread-local destructor of the user's (a `Blas` kept in a `thread_local!`)
    /// may open a section while the thread exits, after any thread-local with a destructor is
    /// gone.
    static IDLE_SECTIONS: [std::cell::Cell<usize>; MAX_NESTED_SECTIONS] =
        const { [const { std::cell::Cell::new(0) }; MAX_NESTED_SECTIONS] };
    static IDLE_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Set on um's event thread (`reclaim/completion.rs`), which runs wakers: a capture begun
    /// there could wait for an idle section whose closure waits for that very thread.
    static NO_CAPTURE_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread runs the closure of an idle section of the device of `shared`.
fn in_idle_section_of(shared: &Shared) -> bool {
    let me = std::ptr::from_ref(shared) as usize;
    let depth = IDLE_DEPTH.with(std::cell::Cell::get);
    IDLE_SECTIONS.with(|v| v[..depth].iter().any(|c| c.get() == me))
}

/// Whether the calling thread runs the closure of an idle section of any device.
fn in_any_idle_section() -> bool {
    IDLE_DEPTH.with(std::cell::Cell::get) > 0
}

/// `Err(`[`Error::InsideDriverCallback`]`)` where the calling thread runs inside one of um's
/// stream callbacks (a user's waker, woken by a stream), where CUDA allows no API call; `Ok`
/// everywhere else. `um` asks it before its own first driver call or lock of every path that
/// reaches the driver ([`Context::make_current`] and every call of `um` that makes its context
/// current first; making a context; counting devices; allocating; the module lookups before
/// their lock), and so do `um-cublas` and `um-nccl`. A library of your own that calls CUDA
/// without going through `um` first can ask it too.
///
/// What `um` drops there is leaked (streams, stream-owned buffers, graphs, a `Blas`, a `Comm`,
/// events) or, for host-owned memory, freed by the reaper thread.
#[inline]
pub fn refuse_inside_stream_callback(what: &'static str) -> Result<()> {
    if in_driver_callback() {
        return Err(Error::InsideDriverCallback { what });
    }
    Ok(())
}

/// `Err(`[`Error::InsideCapture`]`)` where a capture of `um` is open on the calling thread
/// ([`capturing_on_this_thread`]), `Ok` everywhere else; no driver call. For a wait of a library
/// built on `um` (`um_nccl::Comm::wait`): on a capturing thread the driver refuses the wait or
/// the stream query it is made of, and a library that took the refusal for a fault of the work
/// would abort, or leak, for nothing. Asked first, it lets the wait be refused with nothing
/// changed.
#[inline]
pub fn refuse_inside_capture(what: &'static str) -> Result<()> {
    if thread_is_capturing() {
        return Err(Error::InsideCapture { what });
    }
    Ok(())
}

/// Whether a capture of `um` may begin on the calling thread on `ctx`'s device: not inside a
/// driver callback (no CUDA call is allowed there, and the capture lock may be held by a thread
/// waiting for the callback), nor on um's event thread (it runs wakers, which a closure of an
/// idle section may wait for), nor inside the closure of an idle section of that device
/// ([`Context::with_idle_unless_capturing`]: the capture would wait for that closure). (Nor
/// in a thread-local destructor once the thread's record of its captures is gone: checked by
/// `Scope::begin`, above this layer.)
pub(crate) fn may_begin_capture(ctx: &Context) -> Result<()> {
    if in_driver_callback()
        || NO_CAPTURE_HERE.with(std::cell::Cell::get)
        || in_idle_section_of(&ctx.inner.shared)
    {
        return Err(Error::CaptureRefusedHere);
    }
    Ok(())
}

/// Marks the calling thread (um's event thread) as one where no capture of `um` may begin.
pub(crate) fn refuse_captures_on_this_thread() {
    NO_CAPTURE_HERE.with(|c| c.set(true));
}

/// Marks the calling thread as inside a driver callback until dropped (`!Send`): um's stream
/// callback holds one while it runs the user's waker, so that a handle the waker drops neither
/// waits nor blocks on a lock that a waiting thread holds.
pub(crate) struct DriverCallback {
    was: bool,
    _thread: std::marker::PhantomData<*const ()>,
}

impl DriverCallback {
    pub(crate) fn enter() -> DriverCallback {
        DriverCallback {
            was: IN_DRIVER_CALLBACK.with(|c| c.replace(true)),
            _thread: std::marker::PhantomData,
        }
    }
}

impl Drop for DriverCallback {
    fn drop(&mut self) {
        IN_DRIVER_CALLBACK.with(|c| c.set(self.was));
    }
}

/// One idle section of a device, from before its wait until its closure returned: releases
/// the captures waiting to begin when the last one ends (also on an error or a panic).
struct IdleHold<'a> {
    shared: &'a Shared,
}

impl Drop for IdleHold<'_> {
    fn drop(&mut self) {
        self.shared.count.end_idle();
    }
}

/// Marks the calling thread as inside the closure of an idle section of one device until
/// dropped (also when the closure panics): a capture of that device begun there would wait for
/// the section itself, and a nested section of that device may begin while a capture waits.
struct IdleSection {
    _thread: std::marker::PhantomData<*const ()>,
}

impl IdleSection {
    /// The caller checked that fewer than [`MAX_NESTED_SECTIONS`] are open on this thread.
    fn enter(shared: &Shared) -> IdleSection {
        let me = std::ptr::from_ref(shared) as usize;
        let depth = IDLE_DEPTH.with(std::cell::Cell::get);
        IDLE_SECTIONS.with(|v| v[depth].set(me));
        IDLE_DEPTH.with(|d| d.set(depth + 1));
        IdleSection {
            _thread: std::marker::PhantomData,
        }
    }
}

impl Drop for IdleSection {
    fn drop(&mut self) {
        // Sections end in the reverse order they began (each is a scope on this thread).
        IDLE_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// A capture of `um` in progress on a device, from before `cuStreamBeginCapture` to after
/// `cuStreamEndCapture`: while one exists, no module of a dropped handle is unloaded (the wait
/// that comes first would invalidate the capture).
/// Counted on the device and on the thread that made it, where it is dropped (`!Send`).
pub(crate) struct CaptureGuard {
    shared: Arc<Shared>,
    _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        let last_here = leave_thread_capture();
        self.shared.count.end_capture();
        // The last capture of the device: its graves are unloaded and its kept tasks run,
        // unless this thread still captures (nested scopes, another device), in which case
        // that happens once its last capture has ended.
        self.shared.settle();
        if last_here {
            run_after_captures();
        }
    }
}

// SAFETY: a primary context handle may be used from any thread (the driver API is thread-safe
// and `Context::bind` makes it current before each use); the module cache is behind a Mutex.
unsafe impl Send for Inner {}
// SAFETY: as above; `Inner` has no interior mutability outside the Mutex.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // Modules belong to the context: a kernel of one of them may still run (launches keep
        // no reference to the handle, and memory of another handle of the device may be on a
        // stream of this one), so they are unloaded only after a
        // wait for the device's work, which `Shared` does when no capture is in progress. The
        // primary context stays retained by `shared` until its last handle is gone.
        let modules = std::mem::take(
            &mut *self
                .modules
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if !modules.is_empty() {
            self.shared.retire(modules);
        }
    }
}

impl Inner {
    #[inline]
    fn bind(&self) -> Result<()> {
        driver::ctx_bind(self.raw)
    }
}

impl Context {
    /// Initialises the driver and retains the primary context of device `ordinal`, with the
    /// options of [`ContextOptions::from_env`] (by default none: the device as it is;
    /// `UM_EMULATE_NO_CONCURRENT_ACCESS=1` emulates a device without concurrent managed access).
    ///
    /// Fails with [`Error::NoDevice`] on a machine without a GPU, [`Error::InvalidDevice`] for an
    /// ordinal past the last device, [`Error::ManagedMemoryUnsupported`] for a device that
    /// cannot allocate managed memory, and [`Error::InvalidEnvironment`] for a value of the
    /// environment variable that is neither `0` nor `1`.
    pub fn new(ordinal: usize) -> Result<Context> {
        Context::new_with_options(ordinal, ContextOptions::from_env()?)
    }

    /// The old name of [`Context::new_with_options`]: a constructor, which read like the
    /// `with_*` methods of a context (`with_stream`, `with_stream_set`, ...), each of which opens
    /// a scope and runs a closure in it.
    #[deprecated(
        since = "0.1.0",
        note = "renamed `Context::new_with_options`: every other `with_*` of a context opens a scope"
    )]
    pub fn with_options(ordinal: usize, options: ContextOptions) -> Result<Context> {
        Context::new_with_options(ordinal, options)
    }

    /// As [`Context::new`], with explicit `options`; the environment is not read.
    pub fn new_with_options(ordinal: usize, options: ContextOptions) -> Result<Context> {
        refuse_inside_stream_callback("making a context")?;
        driver::init()?;
        let count = driver::device_count()?;
        if count == 0 {
            return Err(Error::NoDevice {
                call: "cuDeviceGetCount",
                name: "no devices".to_owned(),
            });
        }
        if ordinal >= count {
            return Err(Error::InvalidDevice { ordinal, count });
        }
        let device = driver::device_get(ordinal)?;
        let name = driver::device_name(device)?;
        let attr = |a| driver::device_attribute(device, a);
        let emulate = options.emulates_no_concurrent_access();
        if attr(sys::ATTR_MANAGED_MEMORY)? == 0 {
            return Err(Error::ManagedMemoryUnsupported { ordinal, name });
        }
        let info = DeviceInfo {
            ordinal,
            name,
            compute_capability: (attr(sys::ATTR_CC_MAJOR)?, attr(sys::ATTR_CC_MINOR)?),
            multiprocessors: u32::try_from(attr(sys::ATTR_MULTIPROCESSOR_COUNT)?).unwrap_or(1),
            concurrent_managed_access: attr(sys::ATTR_CONCURRENT_MANAGED_ACCESS)? != 0 && !emulate,
            emulated_no_concurrent_access: emulate,
            pageable_memory_access: attr(sys::ATTR_PAGEABLE_MEMORY_ACCESS)? != 0,
            driver_version: driver::driver_version()?,
        };
        let shared = Shared::of(device)?;
        let raw = shared.raw;
        let ctx = Context {
            inner: Arc::new(Inner {
                oversubscribe: std::sync::atomic::AtomicBool::new(false),
                id: {
                    static NEXT: std::sync::atomic::AtomicU64 =
                        std::sync::atomic::AtomicU64::new(1);
                    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                },
                legacy_stream: next_stream_id(),
                raw,
                device,
                info,
                modules: Mutex::new(ModuleCache::default()),
                shared,
            }),
        };
        ctx.bind()?;
        Ok(ctx)
    }

    /// Lets managed allocations of this context exceed the GPU's free memory (default: refused
    /// with [`Error::WouldOversubscribe`]).
    ///
    /// Managed memory may legally be larger than the GPU; the driver then pages it in and out.
    /// On a GPU shared with other programs, that can stall or hang them all, which is why `um`
    /// refuses by default. Opt in only on a GPU you have to yourself.
    pub fn allow_oversubscription(&self, allow: bool) {
        self.inner
            .oversubscribe
            .store(allow, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn oversubscription_allowed(&self) -> bool {
        self.inner
            .oversubscribe
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What the device can do.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// Free and total device memory in bytes, as the driver reports them now.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        driver::mem_info()
    }

    /// Waits for all work of the context, on every stream (`cuCtxSynchronize`). Like
    /// [`Stream::wait_idle`](crate::Stream::wait_idle), it changes no buffer's state: buffers
    /// come back to the host only through their `sync`.
    pub fn wait_idle(&self) -> Result<()> {
        self.bind()?;
        driver::ctx_synchronize()
    }

    /// Makes this context current on the calling thread (a no-op when it already is).
    #[inline]
    pub(crate) fn bind(&self) -> Result<()> {
        refuse_inside_stream_callback("a CUDA call of um")?;
        self.inner.bind()
    }

    /// Makes this context current on the calling thread (`cuCtxSetCurrent`, skipped when it
    /// already is), for a library that works in the current context (cuBLAS, the runtime API):
    /// see [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md). Every `um` call does this itself first, so nothing `um` does
    /// depends on which context is current between its calls.
    #[inline]
    pub fn make_current(&self) -> Result<()> {
        self.bind()
    }

    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    /// The id of this context's legacy default stream (`RawStream`'s identity invariant).
    pub(crate) fn legacy_stream_id(&self) -> u64 {
        self.inner.legacy_stream
    }

    pub(crate) fn device(&self) -> sys::CUdevice {
        self.inner.device
    }

    pub(crate) fn modules(&self) -> &Mutex<ModuleCache> {
        &self.inner.modules
    }

    /// Marks a capture of `um` on this device as in progress until the guard is dropped: take
    /// it before `cuStreamBeginCapture`, drop it after `cuStreamEndCapture`.
    ///
    /// `Err(CaptureRefusedHere)` where it would have to wait for idle sections while this
    /// thread is inside one (of any device): two threads doing so crosswise on two devices
    /// would wait for each other.
    pub(crate) fn capture_guard(&self) -> Result<CaptureGuard> {
        let shared = Arc::clone(&self.inner.shared);
        if !shared.count.begin_capture(in_any_idle_section()) {
            return Err(Error::CaptureRefusedHere);
        }
        enter_thread_capture();
        Ok(CaptureGuard {
            shared,
            _thread: std::marker::PhantomData,
        })
    }

    /// Waits for all work of the context, as [`wait_idle`](Context::wait_idle), unless a
    /// capture of `um` is in progress on this device (any thread) or on the calling thread (any
    /// device), or the calling thread is inside one of um's driver callbacks (a waker), or a
    /// capture of `um` waits to begin on the device (and this thread is in no
    /// [`with_idle_unless_capturing`](Context::with_idle_unless_capturing) closure of it): then
    /// it waits for nothing and returns `Ok(false)`; so it does 16 such closures deep on one
    /// thread. `Ok(true)` once it waited.
    /// No capture of `um` can begin on the device while it waits. Inside the closure of
    /// [`with_idle_unless_capturing`](Context::with_idle_unless_capturing) it waits as anywhere
    /// else, up to that depth.
    ///
    /// For the destructor of a library object whose memory the device may still use (a cuBLAS
    /// handle's workspace, say): a whole-context wait fails a capture in progress on the context,
    /// and is refused on a capturing thread. Where it returns `Ok(false)`, leak the object. If
    /// the destructor itself waits for the device, call it inside
    /// [`with_idle_unless_capturing`](Context::with_idle_unless_capturing) instead.
    pub fn wait_idle_unless_capturing(&self) -> Result<bool> {
        self.with_idle_unless_capturing(|| ())
            .map(|done| done.is_some())
    }

    /// Waits as [`wait_idle_unless_capturing`](Context::wait_idle_unless_capturing), then runs
    /// `f`, and no capture of `um` begins on the device from before the wait until `f` has
    /// returned: `Ok(Some(f()))` once it waited; `Ok(None)`, and `f` not run, where it would not
    /// wait (a capture of `um` in progress on the device or on this thread, or inside a driver
    /// callback); `Err`, and `f` not run, when the wait fails.
    ///
    /// For a library call that itself waits for the whole device, such as `cublasDestroy_v2`:
    /// made in `f`, it cannot fail a capture of `um` that another thread begins meanwhile.
    /// Work that another thread enqueues while `f` runs is not waited
    /// for, so `f` should only release what this thread's earlier work used.
    ///
    /// It also returns `Ok(None)` while a capture of `um` waits to begin on the device (unless
    /// this thread is already inside such a closure of the device): a capture waits only for
    /// the closures in progress when it asked, and for those they nest, never for a stream of
    /// new ones, as long as every closure returns. And it returns `Ok(None)` where 16 such
    /// closures are already open on this thread.
    ///
    /// No lock is held while `f` runs: `f` may use `um` freely, drop handles and buffers, wait,
    /// nest this call, and wait for other threads that do the same. The context is current when
    /// `f` begins; `um` makes the context it needs current before each of its own calls, so code
    /// in `f` that calls another library after a call of `um` makes its context current first.
    /// A capture of `um` that another thread begins on the device waits until every such
    /// closure in progress on the device has returned. Inside `f`, a capture of this device is
    /// refused ([`Error::CaptureRefusedHere`]), and so is a capture of another device that
    /// would have to wait for closures of that device (two threads doing that crosswise would
    /// wait for each other); the thread is marked, and work that an executor or a pool runs on
    /// this thread inside `f` carries the mark too. So **`f` must not wait for a thread that
    /// begins a capture of `um` on this device**, directly or through a lock, a pool or a chain
    /// of threads: that thread waits for `f`, a deadlock. Nor should `f` wait for a thread that
    /// retries a refused call of `um` on this device until it succeeds (a nested
    /// `wait_idle_unless_capturing` on another thread, say) while a capture waits to begin:
    /// the capture waits for `f`, and the call is refused until the capture has begun.
    pub fn with_idle_unless_capturing<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>> {
        self.hold_off_captures(true, f)
    }

    /// Runs `f` while no capture of `um` is in progress on the device, and none can begin
    /// until `f` has returned: as
    /// [`with_idle_unless_capturing`](Context::with_idle_unless_capturing), but without its
    /// wait for the device first. `Ok(Some(f()))`; `Ok(None)`, and `f` not run, where a capture
    /// of `um` is in progress on the device or on this thread, or waits to begin on the
    /// device (unless this thread is already inside such a closure of the device), or inside a
    /// driver callback, or where 16 such closures (of either call) are already open on this
    /// thread; `Err` where the context cannot be made current. A panic of `f` releases the hold
    /// and the thread's mark as it unwinds.
    ///
    /// For a library call that synchronizes with the legacy default stream or allocates (the
    /// set-up of a cuRAND generator, say): such a call fails a capture in progress on the device
    /// (an implicit synchronization with a capturing stream invalidates it), and is refused on a
    /// capturing thread. The same limits hold for `f` as for
    /// [`with_idle_unless_capturing`](Context::with_idle_unless_capturing)'s closure: it must
    /// not wait for a thread that begins a capture of `um` on this device.
    pub fn with_captures_held_off<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>> {
        self.hold_off_captures(false, f)
    }

    /// The body of [`with_idle_unless_capturing`](Context::with_idle_unless_capturing)
    /// (`wait`: after a wait for the context) and of
    /// [`with_captures_held_off`](Context::with_captures_held_off) (no wait).
    fn hold_off_captures<R>(&self, wait: bool, f: impl FnOnce() -> R) -> Result<Option<R>> {
        if in_driver_callback() {
            // Inside um's stream callback (a waker dropping a library object): no CUDA call is
            // allowed, and a thread may wait for this callback.
            return Ok(None);
        }
        let shared = &self.inner.shared;
        let full = IDLE_DEPTH.with(std::cell::Cell::get) >= MAX_NESTED_SECTIONS;
        // From here no capture begins until the hold is dropped (after `f`, or on an error or a
        // panic).
        if !shared.count.begin_idle_unless_capturing(
            thread_is_capturing(),
            in_idle_section_of(shared),
            full,
        ) {
            return Ok(None);
        }
        let _hold = IdleHold { shared };
        let _section = IdleSection::enter(shared);
        self.bind()?;
        if wait {
            driver::ctx_synchronize()?;
        }
        Ok(Some(f()))
    }

    /// Runs `f` as [`with_idle_unless_capturing`](Context::with_idle_unless_capturing) does:
    /// after a wait for all work of the context, with no capture of `um` able to begin on the
    /// device until `f` has returned. Where that call would not wait because a capture of `um`
    /// is in progress on the device (any thread) or on the calling thread (any device), or
    /// waits to begin on the device, `f` is not dropped but kept, and run the same way (after
    /// a wait for the context) by the thread that ends the last of those captures, right after
    /// its `cuStreamEndCapture` (or, if another capture begins or waits meanwhile, at that
    /// one's end).
    ///
    /// `Ok(true)`: `f` ran now. `Ok(false)`: it is kept. `Err`: inside um's stream callback
    /// ([`Error::InsideDriverCallback`]), or the wait failed (a sticky error); `f` is then
    /// dropped unrun, so what it would have released is leaked, never released under a kernel
    /// that may still run.
    ///
    /// For a library object whose release waits for the whole device, or frees memory the
    /// device may still use (a cuBLAS handle and its workspace): its drop during a capture of
    /// `um` then neither fails that capture nor leaks, as [`with_idle_unless_capturing`]'s
    /// `Ok(None)` would make it. Kept, `f` runs on another thread than the caller's, maybe
    /// (hence `Send`), inside the end of a capture, where a panic of it is caught and dropped:
    /// it must release what it owns and do nothing that waits for other threads.
    ///
    /// [`with_idle_unless_capturing`]: Context::with_idle_unless_capturing
    pub fn with_idle_after_captures(&self, f: impl FnOnce() + Send + 'static) -> Result<bool> {
        refuse_inside_stream_callback("a wait for the device")?;
        self.idle_or_keep(Box::new(f))
    }

    /// [`with_idle_after_captures`](Context::with_idle_after_captures) for a boxed task: run in
    /// an idle section now, or kept in the device's tasks, whichever its state allows, decided
    /// under the device's lock (so that no capture can end between the decision and the keep
    /// and strand the task). A panic of a task run now goes to the caller (kept tasks are run
    /// each under `run_caught` by [`Shared::settle`]).
    fn idle_or_keep(&self, task: DeviceTask) -> Result<bool> {
        let shared = &self.inner.shared;
        let here = thread_is_capturing();
        // Decided under the device's lock; from a `Ok` on, no capture begins until the hold is
        // dropped.
        let task = match shared.count.begin_idle_or_keep(
            (self.clone(), task),
            here,
            in_idle_section_of(shared),
        ) {
            Ok((_, task)) => task,
            Err(alone) => {
                if here && alone {
                    // No capture of this device will end to settle it: this thread's will.
                    shared.settle_after_this_threads_captures();
                }
                return Ok(false);
            }
        };
        let _hold = IdleHold { shared };
        // The thread's mark, where there is room for it (16 deep): kept work begins no capture,
        // so only the count above matters to captures of other threads.
        let _section = (IDLE_DEPTH.with(std::cell::Cell::get) < MAX_NESTED_SECTIONS)
            .then(|| IdleSection::enter(shared));
        self.bind()?;
        driver::ctx_synchronize()?;
        task();
        Ok(true)
    }

    /// The device's captures of `um` in progress, captures waiting to begin, and idle sections
    /// in progress (`driver/capture_count.rs`), read under its lock: for `um`'s own tests
    /// (`test_hooks::capture_counts`), which wait for a capture to be waiting.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn capture_counts(&self) -> (usize, usize, usize) {
        let quiet = self.inner.shared.quiet();
        (quiet.captures, quiet.waiting, quiet.idle)
    }

    /// Whether two handles name the same driver context. Two `Context::new` of one device
    /// retain the same primary context, so they are the same context.
    #[inline]
    pub fn same_as(&self, other: &Context) -> bool {
        self.inner.raw == other.inner.raw
    }

    /// The driver's handle of this (primary) context (`CUcontext`), for a library that takes
    /// one. Getting it is safe; using it is a foreign call. `um` retains the context for as
    /// long as this `Context` (or any clone, buffer or stream of it) lives: do not release or
    /// destroy it, nor reset the device, and do not use the handle after the last of them is
    /// dropped.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.inner.raw.cast()
    }

    /// Whether `ctx` is this context's driver handle.
    pub(crate) fn is(&self, ctx: sys::CUcontext) -> bool {
        self.inner.raw == ctx
    }
}

/// How many CUDA devices the driver sees (`cuDeviceGetCount`), after initialising it. On a
/// machine without a GPU this is [`Error::NoDevice`] (from `cuInit`), or `Ok(0)`.
pub fn device_count() -> Result<usize> {
    refuse_inside_stream_callback("counting the devices")?;
    driver::init()?;
    driver::device_count()
}

/// A stream id never drawn before in this process (0 is `RawStream::NONE`'s): for every stream
/// `um` creates, for each thread's per-thread stream, and for each handle's legacy stream
/// (`RawStream`'s identity invariant, `driver/stream.rs`). Here because a `Context` draws the id
/// of its legacy stream when it is made.
pub(crate) fn next_stream_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.info)
            .finish_non_exhaustive()
    }
}

/// The first device of the process without concurrent managed access, if any.
///
/// Globally attached memory is reachable from every device, not only the allocation's
/// (`cuMemAllocManaged`: "accessible from any stream on any device"), and on a device without
/// concurrent managed access the CPU may touch no such memory while any kernel runs there. A
/// kernel on that other device (through `um` or not) would then make every CPU access to a
/// host-owned buffer that is attached globally a fault, which the states cannot prevent: so
/// coherent memory needs every device to have it, not only the allocation's, and unified memory
/// that `attach_global` attached goes back to the host attached to the host where any device
/// lacks it. (The emulated mode belongs to one handle and changes nothing physical: the
/// storages check it on their own context, not here.)
///
/// The devices of a process are fixed once the driver is initialised, so the answer is asked
/// of the driver once and kept (an error is not kept: the next allocation asks again).
pub(crate) fn device_lacking_concurrent_access() -> Result<Option<usize>> {
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::{
        defer_while_capturing, enter_thread_capture, leave_thread_capture, run_after_captures,
    };

    /// What a capture scope does with the thread's count: enters before the capture begins,
    /// leaves after it ended, and runs what was kept when the last one has ended.
    fn capture_on_this_thread<R>(f: impl FnOnce() -> R) -> R {
        enter_thread_capture();
        let r = f();
        if leave_thread_capture() {
            run_after_captures();
        }
        r
    }

    fn recorder() -> (
        Rc<RefCell<Vec<&'static str>>>,
        impl Fn(&'static str) + Clone,
    ) {
        let log = Rc::new(RefCell::new(Vec::new()));
        let to = Rc::clone(&log);
        (log, move |what| to.borrow_mut().push(what))
    }

    /// Work a destructor defers on a capturing thread (a free, a destroy, a teardown) is kept,
    /// not dropped, and runs on the thread once its capture has ended; outside a capture it
    /// runs at once.
    #[test]
    fn work_deferred_while_this_thread_captures_runs_once_its_capture_has_ended() {
        let (log, note) = recorder();
        let n = note.clone();
        assert!(defer_while_capturing(move || n("outside")), "ran now");
        assert_eq!(*log.borrow(), ["outside"]);
        capture_on_this_thread(|| {
            let n = note.clone();
            assert!(!defer_while_capturing(move || n("kept")), "kept");
            assert_eq!(*log.borrow(), ["outside"], "not run during the capture");
        });
        assert_eq!(*log.borrow(), ["outside", "kept"], "run when it ended");
        run_after_captures();
        assert_eq!(log.borrow().len(), 2, "run once");
    }

    /// A library's wait on a capturing thread is refused with `InsideCapture` (no driver call),
    /// and only there; the driver's capture refusals are told from errors of the work through
    /// the public `Error::is_capture_refusal`.
    #[test]
    fn waits_on_a_capturing_thread_are_refused_and_only_there() {
        use super::refuse_inside_capture;
        use crate::error::Error;
        assert_eq!(refuse_inside_capture("a wait"), Ok(()));
        capture_on_this_thread(|| {
            assert_eq!(
                refuse_inside_capture("a wait"),
                Err(Error::InsideCapture { what: "a wait" })
            );
            capture_on_this_thread(|| assert!(refuse_inside_capture("a wait").is_err()));
            assert!(
                refuse_inside_capture("a wait").is_err(),
                "the outer is open"
            );
        });
        assert_eq!(refuse_inside_capture("a wait"), Ok(()), "none open");
        let refused = |code| Error::Driver {
            call: "cuStreamQuery",
            code,
            name: String::new(),
            description: String::new(),
        };
        assert!(refused(900).is_capture_refusal());
        assert!(refused(907).is_capture_refusal());
        assert!(
            !refused(700).is_capture_refusal(),
            "a sticky fault is the work's"
        );
        assert!(!Error::InsideCapture { what: "a wait" }.is_capture_refusal());
    }

    /// Nested captures (a capture begun inside another's closure, or on another device): the
    /// kept work waits for the outermost.
    #[test]
    fn deferred_work_waits_for_the_last_capture_of_the_thread() {
        let (log, note) = recorder();
        capture_on_this_thread(|| {
            capture_on_this_thread(|| {
                let n = note.clone();
                defer_while_capturing(move || n("inner"));
            });
            assert!(log.borrow().is_empty(), "the outer capture is still open");
        });
        assert_eq!(*log.borrow(), ["inner"]);
    }

    /// One kept task that panics does not keep the others from running (they run inside the
    /// end of a capture, which must go on), and work kept on another thread stays there.
    #[test]
    fn a_panicking_deferred_task_does_not_stop_the_others_nor_the_capture_end() {
        let (log, note) = recorder();
        capture_on_this_thread(|| {
            let n = note.clone();
            defer_while_capturing(|| panic!("a task that fails"));
            defer_while_capturing(move || n("after the panic"));
            let other = std::thread::spawn(|| {
                // Another thread does not capture: its work runs there, at once.
                defer_while_capturing(|| ())
            })
            .join();
            assert_eq!(other.ok(), Some(true));
        });
        assert_eq!(*log.borrow(), ["after the panic"]);
    }

    /// Inside um's stream callback (a user's waker) every call of `um` that would
    /// reach the driver is refused before any driver call or lock, and only there.
    #[test]
    fn calls_inside_a_driver_callback_are_refused_and_only_there() {
        use super::{DriverCallback, refuse_inside_stream_callback};
        use crate::error::Error;
        assert_eq!(refuse_inside_stream_callback("x"), Ok(()));
        {
            let _inside = DriverCallback::enter();
            assert_eq!(
                refuse_inside_stream_callback("x"),
                Err(Error::InsideDriverCallback { what: "x" })
            );
            {
                let _nested = DriverCallback::enter();
            }
            assert!(refuse_inside_stream_callback("x").is_err(), "still inside");
        }
        assert_eq!(
            refuse_inside_stream_callback("x"),
            Ok(()),
            "the mark is gone"
        );
    }

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
