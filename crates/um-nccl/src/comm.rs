//! Communicators: one rank of an NCCL communicator, on one device, used by one thread at a time.

use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use um_core::{Context, Eager, Error, Poisoner, Result, Storage, Stream, StreamKind};

use crate::bootstrap::Bootstrap;
use crate::call::{self, Buf, Call};
use crate::ledger::{self, Ledger};
use crate::poll::{Backoff, Deadline, PollClock};
use crate::result::{self, Progress};
use crate::sys::{self, Config, Nccl, RawComm};
use crate::types::{CollectiveStream, Element, ReduceOp, UniqueId};

/// How a communicator is made and how long it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommOptions {
    blocking: bool,
    timeout: Duration,
}

impl Default for CommOptions {
    fn default() -> Self {
        CommOptions {
            blocking: false,
            timeout: Duration::from_secs(120),
        }
    }
}

impl CommOptions {
    /// Nonblocking (every NCCL call returns at once and `um-nccl` polls it, up to the time
    /// limit), with a time limit of 120 s.
    pub fn new() -> Self {
        Self::default()
    }

    /// A blocking communicator (`ncclConfig_t::blocking = 1`), or the default nonblocking one.
    ///
    /// NCCL 2.28 runs every call on a nonblocking communicator through a thread it starts for
    /// that call; a blocking one enqueues on the calling thread, which costs less host time per
    /// collective ([`docs/performance.md`](https://github.com/um-rs/um/blob/main/docs/performance.md), section 8). The price: its calls (creation, the first
    /// collective with a peer, destruction) may block without bound when a peer has died, or
    /// has not called yet, including another rank that the same thread would only call next
    /// (the first collective connects inside the call and waits for the peer; see [`Comm`],
    /// "Threads"). A kernel waiting for a dead peer is bounded either way by [`Comm::wait`].
    pub fn blocking(mut self, blocking: bool) -> Self {
        self.blocking = blocking;
        self
    }

    /// How long creation, each enqueue, and the drop's flush may take before the communicator is
    /// aborted (default 120 s).
    ///
    /// Creation loads NCCL's kernels, which takes seconds under a tool that instruments them
    /// (17 s under compute-sanitizer's memcheck on an H100): allow for it. A creation that
    /// runs out of time is aborted (`ncclCommAbort`), and NCCL 2.28 keeps 4 bytes of pinned
    /// host memory of it for the life of the process (memcheck reports them as leaked from
    /// `ncclCommInitRankConfig`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether the communicator is blocking.
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// The time limit.
    pub fn time_limit(&self) -> Duration {
        self.timeout
    }
}

/// One rank of an NCCL communicator: its device's [`Context`], its rank and the world size.
///
/// # Threads
///
/// A communicator is `Send` but not `Sync`: it moves to any thread, and only one thread uses it
/// at a time (NCCL: a `ncclComm_t` must not be used by two threads at once). Every method takes
/// `&self`, and sharing `&Comm` between threads does not compile. One thread may hold several
/// communicators (a whole clique from [`Comm::init_all`]); calls that involve more than one of
/// them must then go into one [`Group`](crate::Group), since each waits for its peers: a
/// thread that calls a collective on one rank and then on another waits, on the first, for a
/// peer that its own thread would only call afterwards. On a nonblocking communicator (the
/// default) `um-nccl` turns that into [`Error::Timeout`] after the communicator's time limit
/// (and aborts it) instead of a hang. On a blocking one it cannot: NCCL (2.22 and later) makes
/// the connections of a first collective inside the call, which then waits for the peer with no
/// limit, and `um-nccl` does not know which thread holds the peer ([`CommOptions::blocking`]).
///
/// # Buffers and streams
///
/// Every collective runs on a [`Stream`] of the communicator's device and takes buffers that
/// stream owns: read buffers as `&`, written ones as `&mut`, of any storage (unified, coherent,
/// mirrored: a mirror's device half, marked written). Counts come from the buffers' lengths;
/// a size that breaks the collective's rule, a stream of another device, a buffer of another
/// stream of a set, a root or peer that is not a rank: each is an `Err` before anything is
/// enqueued. The call returns once NCCL has enqueued the work (on a nonblocking communicator,
/// once its state is no longer `ncclInProgress`): a `sync` of the buffers then waits for it.
///
/// # Faults
///
/// [`Comm::wait`] waits for a stream with a time limit, watching NCCL's asynchronous error.
/// On a timeout, an NCCL error, or a CUDA error of the stream, the communicator is aborted
/// (`ncclCommAbort`) and every stream it ever enqueued work on is poisoned **first**
/// ([`um_core::Poisoner`]): buffers those streams own are leaked, never freed nor given back to
/// the CPU, since an aborted collective (or a peer that was given their address) may still touch
/// them. A plain `sync` after a collective whose peer died blocks in `cuStreamSynchronize` for
/// as long as the collective does, which may be forever: wait with [`Comm::wait`] first.
pub struct Comm {
    raw: RawComm,
    nccl: &'static Nccl,
    ctx: Context,
    rank: usize,
    world_size: usize,
    options: CommOptions,
    ledger: Arc<Ledger>,
    /// Interior state: `Comm` is not `Sync`, so one thread at a time touches it.
    state: RefCell<State>,
    /// Set with `State::aborted`, never cleared: [`Comm::live`]'s check of a communicator never
    /// aborted (every call makes it, some several times) is one read.
    down: Cell<bool>,
}

#[derive(Default)]
struct State {
    /// Why the communicator was aborted (its handle is then dangling, never used again).
    aborted: Option<String>,
    /// An abort's `ncclCommAbort` (and leaving the ledger) not made yet: set by every abort,
    /// cleared when it is made, at once outside um's stream callback; inside one (no NCCL call
    /// may be made there) by the next call, `wait`, `abort` or drop on an ordinary thread, so
    /// that the communicator's kernels do not run for ever.
    abort_owed: bool,
    /// The streams the communicator enqueued work on, to poison at an abort.
    streams: Vec<Poisoner>,
}

// SAFETY: NCCL lets a communicator be used from any thread, one at a time; `Comm` is not `Sync`,
// so no two threads use one at once (a `&Comm` cannot be shared, and `&mut`/ownership moves it
// whole). A group in progress is NCCL thread-local state, but `um-nccl` starts and ends each
// group inside one call. The other fields are `Send`.
unsafe impl Send for Comm {}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &self.device())
            .field("blocking", &self.options.blocking)
            .field("aborted", &self.state.borrow().aborted)
            .finish_non_exhaustive()
    }
}

fn check_world(rank: usize, world_size: usize) -> Result<c_int> {
    let world = c_int::try_from(world_size).ok().filter(|w| *w > 0);
    match world {
        Some(w) if rank < world_size => Ok(w),
        _ => Err(Error::Bootstrap {
            reason: format!(
                "rank {rank} of a world of {world_size}: a rank must be below a world size of 1 to {}",
                c_int::MAX
            ),
        }),
    }
}

/// Leaves the ledger unless disarmed: the rank of a communicator that was never made.
struct Member<'a> {
    ledger: &'a Ledger,
    rank: usize,
    armed: bool,
}

impl Drop for Member<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.ledger.leave(self.rank);
        }
    }
}

/// Polls a fresh nonblocking communicator until its creation is done (or fails, or times out).
fn init_done(nccl: &Nccl, raw: RawComm, deadline: Deadline, timeout: Duration) -> Result<()> {
    let backoff = Backoff::new();
    loop {
        // SAFETY: `raw` is a communicator NCCL returned (creation may still run), not aborted.
        let state = unsafe { result::comm_get_async_error(nccl, raw) }?;
        match state {
            sys::SUCCESS => return Ok(()),
            sys::IN_PROGRESS => {}
            e => return Err(nccl.error("ncclCommInitRankConfig", e, Some(raw))),
        }
        if deadline.passed() {
            return Err(Error::Timeout {
                what: "creating the communicator (every rank must call it)".to_owned(),
                after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            });
        }
        backoff.wait();
    }
}

/// Aborts communicators that were never handed out (a failed creation).
fn abort_raw(nccl: &Nccl, raws: &[RawComm]) {
    for raw in raws.iter().filter(|r| !r.is_null()) {
        // SAFETY: a communicator NCCL returned, aborted once, never used again.
        let _ = unsafe { result::comm_abort(nccl, *raw) };
    }
}

impl Comm {
    /// Rank `rank` of a communicator of `world_size` ranks named by `id`, on `ctx`'s device
    /// (`ncclCommInitRankConfig`): every rank calls it with the same id and world size, each
    /// with its own rank and device. Returns once every rank has joined (or fails after the time
    /// limit of `options`).
    pub fn init_rank(
        ctx: &Context,
        id: &UniqueId,
        rank: usize,
        world_size: usize,
        options: CommOptions,
    ) -> Result<Comm> {
        // `nccl()` refuses inside um's stream callback, before the ledger is joined: a refused
        // join would leave it.
        let nccl = sys::nccl()?;
        let world = check_world(rank, world_size)?;
        let ledger = Ledger::join(id.as_bytes(), rank, world_size)?;
        let mut member = Member {
            ledger: &ledger,
            rank,
            armed: true,
        };
        ctx.make_current()?;
        let deadline = Deadline::after(options.timeout);
        let mut raw: RawComm = std::ptr::null_mut();
        let mut config = Config::new(options.blocking);
        // SAFETY: `rank < world_size`; `config` lives until this function returns, after the
        // creation is done (polled below); the device is the current context's (made current
        // above).
        let created = unsafe {
            result::comm_init_rank_config(
                nccl,
                &mut raw,
                world,
                id.raw(),
                rank as c_int,
                &mut config,
            )
        };
        let done = match created {
            Ok(_) if !raw.is_null() => {
                if options.blocking {
                    Ok(())
                } else {
                    init_done(nccl, raw, deadline, options.timeout)
                }
            }
            Ok(_) => Err(nccl.error("ncclCommInitRankConfig", sys::IN_PROGRESS, None)),
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            abort_raw(nccl, &[raw]);
            return Err(e);
        }
        member.armed = false;
        drop(member);
        Ok(Comm {
            raw,
            nccl,
            ctx: ctx.clone(),
            rank,
            world_size,
            options,
            ledger,
            state: RefCell::default(),
            down: Cell::new(false),
        })
    }

    /// One communicator per device of `contexts`, all in this process, rank `i` on
    /// `contexts[i]` (NCCL's `ncclCommInitAll`, made as one `ncclCommInitRankConfig` per device
    /// inside a group so that they can be nonblocking). The devices must differ.
    ///
    /// The communicators may then go to one thread each, or stay on one thread that drives them
    /// all through [`Group`](crate::Group)s.
    pub fn init_all(contexts: &[Context], options: CommOptions) -> Result<Vec<Comm>> {
        let nccl = sys::nccl()?; // refuses inside um's stream callback, before any NCCL call
        let n = contexts.len();
        let world = check_world(0, n)?;
        for (i, a) in contexts.iter().enumerate() {
            if contexts[..i]
                .iter()
                .any(|b| b.info().ordinal == a.info().ordinal)
            {
                return Err(Error::Bootstrap {
                    reason: format!(
                        "device {} is given twice: NCCL does not support one device as two ranks of one communicator",
                        a.info().ordinal
                    ),
                });
            }
        }
        let id = UniqueId::new()?;
        let ledger = Ledger::join(id.as_bytes(), 0, n)?;
        for rank in 1..n {
            if let Err(e) = Ledger::join(id.as_bytes(), rank, n) {
                for joined in 0..rank {
                    ledger.leave(joined);
                }
                return Err(e);
            }
        }
        let mut members: Vec<Member<'_>> = (0..n)
            .map(|rank| Member {
                ledger: &ledger,
                rank,
                armed: true,
            })
            .collect();
        let deadline = Deadline::after(options.timeout);
        let mut raws: Vec<RawComm> = vec![std::ptr::null_mut(); n];
        let mut configs: Vec<Config> = (0..n).map(|_| Config::new(options.blocking)).collect();
        let mut first_err = None;
        // SAFETY: matched by the group end below, on this thread, on every path past it (a
        // start that failed opened no group).
        unsafe { result::group_start(nccl) }?;
        for (rank, ctx) in contexts.iter().enumerate() {
            if let Err(e) = ctx.make_current() {
                first_err.get_or_insert(e);
                break;
            }
            // SAFETY: the config stays alive until the group's end, and until the creation is
            // polled to its end below or aborted; `rank < n`; the rank's device is current.
            let created = unsafe {
                result::comm_init_rank_config(
                    nccl,
                    &mut raws[rank],
                    world,
                    id.raw(),
                    rank as c_int,
                    &mut configs[rank],
                )
            };
            if let Err(e) = created {
                first_err.get_or_insert(e);
                break;
            }
        }
        // SAFETY: ends the group started above, whose configs are still alive.
        if let Err(e) = unsafe { result::group_end(nccl) } {
            first_err.get_or_insert(e);
        }
        if first_err.is_none() && !options.blocking {
            for raw in &raws {
                if raw.is_null() {
                    continue;
                }
                if let Err(e) = init_done(nccl, *raw, deadline, options.timeout) {
                    first_err = Some(e);
                    break;
                }
            }
        }
        if first_err.is_none() && raws.iter().any(|r| r.is_null()) {
            first_err = Some(nccl.error("ncclCommInitRankConfig", sys::IN_PROGRESS, None));
        }
        if let Some(e) = first_err {
            // The configs outlive the aborts: a creation not polled to its end (the ranks after
            // one that failed or ran out of time) may still be in progress until its abort.
            abort_raw(nccl, &raws);
            drop(configs);
            return Err(e);
        }
        // Every creation is done (blocking: at the group's end; nonblocking: polled above).
        drop(configs);
        for m in &mut members {
            m.armed = false;
        }
        drop(members);
        Ok(raws
            .into_iter()
            .zip(contexts)
            .enumerate()
            .map(|(rank, (raw, ctx))| Comm {
                raw,
                nccl,
                ctx: ctx.clone(),
                rank,
                world_size: n,
                options,
                ledger: Arc::clone(&ledger),
                state: RefCell::default(),
                down: Cell::new(false),
            })
            .collect())
    }

    /// This process's rank of a job launched the torchrun/SLURM way (see [`Bootstrap`]): the
    /// device `LOCAL_RANK`, the id from rank 0 over TCP (within the options' time limit), then
    /// [`Comm::init_rank`].
    pub fn from_env(options: CommOptions) -> Result<Comm> {
        let boot = Bootstrap::from_env()?.timeout(options.timeout);
        let ctx = Context::new(boot.local_rank())?;
        let id = boot.unique_id()?;
        Comm::init_rank(&ctx, &id, boot.rank(), boot.world_size(), options)
    }

    /// This communicator's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The context of the communicator's device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The ordinal of the communicator's device.
    pub fn device(&self) -> usize {
        self.ctx.info().ordinal
    }

    /// The options it was made with.
    pub fn options(&self) -> CommOptions {
        self.options
    }

    /// Whether it was aborted (then every call returns [`Error::CommunicatorAborted`]).
    pub fn is_aborted(&self) -> bool {
        self.state.borrow().aborted.is_some()
    }

    /// The NCCL handle (`ncclComm_t`), for a call `um-nccl` does not make. Getting it is safe;
    /// using it is a foreign call, with the contract of [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md) for the buffers and
    /// streams it touches, and NCCL's: not from two threads at once, not after this `Comm` is
    /// dropped or aborted (once [`is_aborted`](Comm::is_aborted) is true: an abort made inside
    /// um's stream callback is marked at once, and `ncclCommAbort` made by the next call,
    /// `wait`, `abort` or drop of this `Comm`), never destroyed or aborted by the caller, and on
    /// a nonblocking communicator polled (`ncclCommGetAsyncError`) until it is no longer
    /// `ncclInProgress` before any call of this `Comm`, its drop included.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.raw
    }

    pub(crate) fn live(&self) -> Result<()> {
        if !self.down.get() {
            // Never aborted: no abort is owed either (both are set together).
            return Ok(());
        }
        self.pay_owed_abort();
        match &self.state.borrow().aborted {
            None => Ok(()),
            Some(reason) => Err(Error::CommunicatorAborted {
                reason: reason.clone(),
            }),
        }
    }

    pub(crate) fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub(crate) fn nccl(&self) -> &'static Nccl {
        self.nccl
    }

    pub(crate) fn raw(&self) -> RawComm {
        self.raw
    }

    /// The stream is of this communicator's device, and not poisoned.
    pub(crate) fn check_stream<K: StreamKind>(&self, stream: &Stream<'_, K>) -> Result<()> {
        self.live()?;
        if !stream.context().same_as(&self.ctx) {
            return Err(Error::WrongDevice {
                stream: stream.context().info().ordinal,
                communicator: self.device(),
            });
        }
        if stream.is_poisoned() {
            return Err(Error::StreamPoisoned);
        }
        Ok(())
    }

    /// Remembers a stream this communicator is about to enqueue work on (a handle to poison it
    /// with, made only for a stream it has not remembered yet).
    pub(crate) fn remember(&self, stream: &dyn Idle) {
        let mut st = self.state.borrow_mut();
        if st.streams.iter().rev().any(|p| stream.is_poisoned_by(p)) {
            return;
        }
        if st.streams.len() >= 16 {
            st.streams.retain(Poisoner::is_live);
        }
        st.streams.push(stream.poisoner());
    }

    /// NCCL's state of the communicator: `ncclSuccess`, `ncclInProgress` or an error.
    pub(crate) fn async_state(&self) -> Result<i32> {
        self.live()?;
        // SAFETY: a live communicator (not aborted).
        unsafe { result::comm_get_async_error(self.nccl, self.raw) }
    }

    /// Polls until NCCL is done with the last call (`ncclInProgress` no more), within `clock`'s
    /// limit: `Err` with the error or the timeout. Aborts nothing (the caller does).
    pub(crate) fn poll_ready(&self, call: &'static str, clock: &mut PollClock) -> Result<()> {
        loop {
            match self.async_state()? {
                sys::SUCCESS => return Ok(()),
                sys::IN_PROGRESS => {}
                e => return Err(self.nccl.error(call, e, Some(self.raw))),
            }
            if !clock.again() {
                return Err(Error::Timeout {
                    what: format!("{call} on rank {} (NCCL still in progress)", self.rank),
                    after_ms: u64::try_from(self.options.timeout.as_millis()).unwrap_or(u64::MAX),
                });
            }
        }
    }

    /// Aborts the communicator: poisons every stream it enqueued work on, then `ncclCommAbort`.
    /// Buffers those streams own are leaked from now on. Further calls return
    /// [`Error::CommunicatorAborted`]. Does nothing if it was aborted already.
    ///
    /// `um-nccl` aborts by itself on a timeout or an error; call this to give up on your own
    /// terms (a signal, a deadline of your own).
    ///
    /// Inside a capture closure of `um` (on the capturing thread), the communicator is marked
    /// aborted and its streams poisoned at once, and the `ncclCommAbort` (which frees memory
    /// and waits, both refused on a capturing thread) is made on this thread once its captures
    /// have ended ([`um_core::defer_while_capturing`]).
    pub fn abort(&self) {
        self.pay_owed_abort();
        self.abort_because("aborted by the program".to_owned());
    }

    /// Makes the `ncclCommAbort` (and leaves the ledger) that an abort owes, once, where NCCL
    /// may be called: at once for an abort outside um's stream callback, later for one inside;
    /// on a thread that captures, once its captures have ended.
    fn pay_owed_abort(&self) {
        if um_core::refuse_inside_stream_callback("aborting a communicator").is_err() {
            return;
        }
        let Ok(mut st) = self.state.try_borrow_mut() else {
            return;
        };
        if !st.abort_owed {
            return;
        }
        // The debt moves into `abort` below, which is run once or never: no other path makes
        // this abort (`abort_owed` is set only with `aborted`, which is never cleared).
        st.abort_owed = false;
        drop(st);
        let (raw, nccl, ctx) = (self.raw, self.nccl, self.ctx.clone());
        let (ledger, rank) = (Arc::clone(&self.ledger), self.rank);
        let abort = move || {
            let _ = ctx.make_current();
            // SAFETY: a communicator NCCL returned, marked aborted and not aborted since (the
            // debt, taken from `abort_owed` above, is this closure's alone, and a `FnOnce` runs
            // once). Nothing else frees or uses the handle meanwhile: every call of the `Comm`
            // refuses it once `aborted` is set, its drop makes no NCCL call for an aborted
            // communicator whose abort is not owed, and `as_raw` forbids use after the mark.
            // Kept for a capture's end, it runs on this thread, and the `Comm`, should it have
            // moved to another, makes no NCCL call there.
            let _ = unsafe { result::comm_abort(nccl, raw) };
            ledger.leave(rank);
        };
        // On a thread that captures, `ncclCommAbort` frees memory and waits for its streams:
        // the driver refuses both there (the memory would be lost, and the capture fail). It is
        // made on this thread once its captures have ended; meanwhile the communicator is marked
        // aborted and its streams poisoned (rule 164: their buffers are never freed nor given
        // to the CPU). If the thread exits inside the capture, the abort is forgotten and the
        // communicator leaked with its kernels, as inside a driver callback.
        um_core::defer_while_capturing(abort);
    }

    pub(crate) fn abort_because(&self, reason: String) {
        let Ok(mut st) = self.state.try_borrow_mut() else {
            return;
        };
        if st.aborted.is_some() {
            return;
        }
        // The mark first: a buffer whose drop sees its stream idle because of the abort must
        // already see the mark (`Poisoner`).
        for stream in &st.streams {
            stream.poison();
        }
        // The abort is owed, then paid at once where NCCL may be called. Inside um's stream
        // callback (a waker that aborts) no NCCL or CUDA call is allowed, and NCCL's abort may
        // wait for its streams, which wait for the callback: there it stays owed to the next
        // call, `wait`, `abort` or drop on an ordinary thread.
        st.abort_owed = true;
        st.aborted = Some(reason);
        self.down.set(true);
        drop(st);
        self.pay_owed_abort();
    }

    /// After a call on this communicator alone: `Ok` once NCCL enqueued it, else the
    /// communicator is aborted and the error returned.
    fn settle(&self, call: &'static str, issued: Result<Progress>) -> Result<()> {
        let outcome = match (issued, self.options.blocking) {
            (Ok(Progress::Done), true) => Ok(()),
            (Ok(_), false) => self.poll_ready(call, &mut PollClock::new(self.options.timeout)),
            // A blocking communicator's call does not stay in progress.
            (Ok(Progress::InProgress), true) => {
                Err(self.nccl.error(call, sys::IN_PROGRESS, Some(self.raw)))
            }
            (Err(e), _) => Err(e),
        };
        if let Err(e) = &outcome {
            self.abort_because(e.to_string());
        }
        outcome
    }

    /// Records, remembers the stream, issues one call and settles it.
    fn run(&self, call: Result<Call>, stream: &dyn Idle) -> Result<()> {
        um_core::refuse_inside_stream_callback("a collective")?;
        let call = call?;
        self.live()?;
        ledger::record_all(std::iter::once((
            self.ledger(),
            self.rank,
            call.channel,
            call.sig,
        )))?;
        self.remember(stream);
        // SAFETY: `call` was built by `crate::call` from buffers and a stream the caller of
        // this method still borrows, for this communicator, which is live and done with its
        // last call (every call and group on it polled a nonblocking one to the end, or aborted
        // it: `settle`, `Group::launch`).
        let (name, issued) = unsafe { call.issue(self.nccl, self.raw) };
        self.settle(name, issued)
    }

    /// All-reduce (`ncclAllReduce`): `recv` on every rank gets `op` over every rank's `send`.
    /// The buffers hold the same number of elements.
    pub fn all_reduce<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &self,
        stream: &Stream<'s, K>,
        send: &Buf<'s, T, K, M1>,
        recv: &mut Buf<'s, T, K, M2>,
        op: ReduceOp,
    ) -> Result<()> {
        self.run(call::all_reduce(self, stream, send, recv, op), stream)
    }

    /// All-reduce in place: `buf` is the input and gets the result.
    pub fn all_reduce_in_place<'s, T: Element, K: CollectiveStream, M: Storage>(
        &self,
        stream: &Stream<'s, K>,
        buf: &mut Buf<'s, T, K, M>,
        op: ReduceOp,
    ) -> Result<()> {
        self.run(call::all_reduce_in_place(self, stream, buf, op), stream)
    }

    /// Broadcast (`ncclBroadcast`): `recv` on every rank gets `root`'s `send` (read on the root
    /// only, but passed by every rank, of the same length as `recv`).
    pub fn broadcast<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &self,
        stream: &Stream<'s, K>,
        send: &Buf<'s, T, K, M1>,
        recv: &mut Buf<'s, T, K, M2>,
        root: usize,
    ) -> Result<()> {
        self.run(call::broadcast(self, stream, send, recv, root), stream)
    }

    /// Broadcast in place: `buf` is the root's input and every other rank's output.
    pub fn broadcast_in_place<'s, T: Element, K: CollectiveStream, M: Storage>(
        &self,
        stream: &Stream<'s, K>,
        buf: &mut Buf<'s, T, K, M>,
        root: usize,
    ) -> Result<()> {
        self.run(call::broadcast_in_place(self, stream, buf, root), stream)
    }

    /// Reduce (`ncclReduce`): `root`'s `recv` gets `op` over every rank's `send`; `recv` is
    /// written on the root only, and passed by every rank, of the same length as `send`.
    pub fn reduce<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &self,
        stream: &Stream<'s, K>,
        send: &Buf<'s, T, K, M1>,
        recv: &mut Buf<'s, T, K, M2>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        self.run(call::reduce(self, stream, send, recv, op, root), stream)
    }

    /// All-gather (`ncclAllGather`): `recv` gets every rank's `send`, rank `i`'s at
    /// `i * send.len()`. `recv` holds world size times `send`.
    pub fn all_gather<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &self,
        stream: &Stream<'s, K>,
        send: &Buf<'s, T, K, M1>,
        recv: &mut Buf<'s, T, K, M2>,
    ) -> Result<()> {
        self.run(call::all_gather(self, stream, send, recv), stream)
    }

    /// Reduce-scatter (`ncclReduceScatter`): rank `i`'s `recv` gets block `i` of `op` over
    /// every rank's `send`. `send` holds world size times `recv`.
    pub fn reduce_scatter<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &self,
        stream: &Stream<'s, K>,
        send: &Buf<'s, T, K, M1>,
        recv: &mut Buf<'s, T, K, M2>,
        op: ReduceOp,
    ) -> Result<()> {
        self.run(call::reduce_scatter(self, stream, send, recv, op), stream)
    }

    /// Sends `buf` to `peer` (`ncclSend`), which receives it with a [`Comm::recv`] of the same
    /// length. Not to this rank itself (that needs its receive in the same [`Group`](crate::Group)).
    pub fn send<'s, T: Element, K: CollectiveStream, M: Storage>(
        &self,
        stream: &Stream<'s, K>,
        buf: &Buf<'s, T, K, M>,
        peer: usize,
    ) -> Result<()> {
        self.run(call::send(self, stream, buf, peer, false), stream)
    }

    /// Receives into `buf` from `peer` (`ncclRecv`), which sends as many elements.
    pub fn recv<'s, T: Element, K: CollectiveStream, M: Storage>(
        &self,
        stream: &Stream<'s, K>,
        buf: &mut Buf<'s, T, K, M>,
        peer: usize,
    ) -> Result<()> {
        self.run(call::recv(self, stream, buf, peer, false), stream)
    }

    /// Waits until all work queued on `stream` (a stream of this communicator's device) has
    /// completed, for at most `timeout`, watching the communicator for NCCL's asynchronous
    /// errors (a dead peer, a network error). On a timeout or an error the communicator is
    /// aborted, its streams poisoned (their buffers are leaked, never freed), and the error
    /// returned. On `Ok` the buffers' `sync` no longer waits.
    ///
    /// Inside a capture closure of `um` (on the capturing thread) the driver refuses the stream
    /// queries a wait is made of: the wait is refused first, [`Error::InsideCapture`], with
    /// nothing aborted and no stream poisoned (returned from the closure, it fails the
    /// capture). A query the driver refuses because of another library's capture is returned
    /// as it is ([`Error::is_capture_refusal`]), and aborts nothing either.
    pub fn wait<K: Eager>(&self, stream: &Stream<'_, K>, timeout: Duration) -> Result<()> {
        // Inside um's stream callback a wait is refused, not taken for a failure that aborts the
        // communicator.
        um_core::refuse_inside_stream_callback("waiting for a communicator")?;
        self.live()?;
        if !stream.context().same_as(&self.ctx) {
            return Err(Error::WrongDevice {
                stream: stream.context().info().ordinal,
                communicator: self.device(),
            });
        }
        // On a capturing thread the query would be refused (and fail the capture): refused
        // here, so that the refusal is not taken for a fault of the stream, which would abort
        // the communicator and poison the stream (leaking its buffers) for nothing.
        um_core::refuse_inside_capture("waiting for a communicator")?;
        wait_pairs(&[(self, stream as &dyn Idle)], timeout)
    }
}

/// A stream whose completion can be asked for: any `um` stream.
pub(crate) trait Idle {
    fn idle(&self) -> Result<bool>;
    /// A handle that poisons this stream.
    fn poisoner(&self) -> Poisoner;
    /// Whether `p` is a handle of this stream.
    fn is_poisoned_by(&self, p: &Poisoner) -> bool;
}

impl<K: Eager> Idle for Stream<'_, K> {
    fn idle(&self) -> Result<bool> {
        self.is_idle()
    }

    fn poisoner(&self) -> Poisoner {
        Stream::poisoner(self)
    }

    fn is_poisoned_by(&self, p: &Poisoner) -> bool {
        Stream::is_poisoned_by(self, p)
    }
}

/// Waits until every stream of `pairs` is idle, for at most `timeout`, watching each
/// communicator's asynchronous error; on any failure aborts every communicator of `pairs`
/// (poisoning their streams) and returns the error. A stream query that the driver refuses
/// because of a capture is no failure of the work: it is returned, and aborts nothing. The
/// callers refuse a wait on a capturing thread before this (`refuse_inside_capture`).
pub(crate) fn wait_pairs(pairs: &[(&Comm, &dyn Idle)], timeout: Duration) -> Result<()> {
    let abort_all = |why: &str| {
        for (comm, _) in pairs {
            comm.abort_because(why.to_owned());
        }
    };
    let deadline = Deadline::after(timeout);
    let mut done = vec![false; pairs.len()];
    let backoff = Backoff::new();
    loop {
        for (i, (_, stream)) in pairs.iter().enumerate() {
            if done[i] {
                continue;
            }
            match stream.idle() {
                Ok(true) => done[i] = true,
                Ok(false) => {}
                // Refused because a capture is in progress (another library's, in global mode,
                // or this thread's in a path the callers did not refuse): the query did nothing
                // and says nothing about the stream, so nothing is aborted or poisoned.
                Err(e) if e.is_capture_refusal() => return Err(e),
                Err(e) => {
                    abort_all(&format!("the stream reported an error: {e}"));
                    return Err(e);
                }
            }
        }
        if done.iter().all(|d| *d) {
            return Ok(());
        }
        for (comm, _) in pairs {
            match comm.async_state() {
                Ok(sys::SUCCESS | sys::IN_PROGRESS) => {}
                Ok(e) => {
                    let err = comm
                        .nccl()
                        .error("ncclCommGetAsyncError", e, Some(comm.raw()));
                    abort_all(&err.to_string());
                    return Err(err);
                }
                Err(err) => {
                    abort_all(&err.to_string());
                    return Err(err);
                }
            }
        }
        if deadline.passed() {
            let waiting: Vec<String> = pairs
                .iter()
                .zip(&done)
                .filter(|(_, d)| !**d)
                .map(|((c, _), _)| c.rank().to_string())
                .collect();
            let err = Error::Timeout {
                what: format!("the work on the stream of rank(s) {}", waiting.join(", ")),
                after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            };
            abort_all(&err.to_string());
            return Err(err);
        }
        backoff.wait();
    }
}

impl Comm {
    /// This communicator, moved out of `self` (which keeps no state of it, and whose drop then
    /// does nothing): for a teardown made later, elsewhere.
    fn take_for_later(&mut self) -> Comm {
        Comm {
            raw: self.raw,
            nccl: self.nccl,
            ctx: self.ctx.clone(),
            rank: self.rank,
            world_size: self.world_size,
            options: self.options,
            ledger: Arc::clone(&self.ledger),
            state: RefCell::new(std::mem::take(self.state.get_mut())),
            down: Cell::new(self.down.get()),
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if um_core::capturing_on_this_thread() {
            // Inside a capture closure of um on this thread (or a destructor run there): NCCL's
            // teardown frees memory and waits for its streams, which the driver refuses on a
            // capturing thread (the memory would be lost, and the capture fail). The
            // communicator is torn down on this thread once its captures have ended, as it
            // would be here (flushed and destroyed, or its abort made). If the thread exits
            // inside the capture, it is leaked.
            let later = self.take_for_later();
            um_core::defer_while_capturing(move || drop(later));
            return;
        }
        if self.is_aborted() {
            // An abort owed by a callback is made here, outside one (inside one it stays owed,
            // and the communicator is leaked with its kernels: documented).
            self.pay_owed_abort();
            return;
        }
        // Without its context (inside um's stream callback, a waker that drops the
        // communicator, where CUDA and NCCL calls are not allowed; or a context that cannot be
        // made current) nothing here may run: the flush polls for up to the timeout, and a
        // blocking destroy waits for the stream, which waits for the callback. Leak it;
        // its peers see a rank that stopped, as when a process dies.
        if self.ctx.make_current().is_err() {
            return;
        }
        let flushed = if self.options.blocking {
            true
        } else {
            // SAFETY: a live communicator, finalized once, done with its last call (every call
            // polled it to the end, or aborted it); finalize flushes its work (polled below).
            let finalized = unsafe { result::comm_finalize(self.nccl, self.raw) };
            finalized.is_ok()
                && self
                    .poll_ready(
                        "ncclCommFinalize",
                        &mut PollClock::new(self.options.timeout),
                    )
                    .is_ok()
        };
        if flushed {
            // SAFETY: a live communicator with no call in progress: a nonblocking one's finalize
            // was polled to its end; a blocking one's calls returned done, and NCCL finalizes
            // it inside the destroy. Destroyed once, never used again.
            let _ = unsafe { result::comm_destroy(self.nccl, self.raw) };
            self.ledger.leave(self.rank);
        } else {
            // The flush failed or timed out: work may still be in flight. Poison and abort.
            self.abort_because("the flush at drop failed or timed out".to_owned());
        }
    }
}
