//! Groups: several NCCL calls, on one or several communicators, issued together between
//! `ncclGroupStart` and `ncclGroupEnd`. This is how one thread drives several GPUs, and how a
//! rank sends and receives at once.

use std::marker::PhantomData;
use std::time::Duration;

use smallvec::SmallVec;
use um_core::{Error, Result, Storage, Stream};

use crate::call::{self, Buf, Call};
use crate::comm::{Comm, Idle, wait_pairs};
use crate::ledger;
use crate::list::List;
use crate::phases;
use crate::poll::PollClock;
use crate::result::{self, Progress};
use crate::sys;
use crate::types::{CollectiveStream, Element, ReduceOp};

/// Calls collected for one `ncclGroupStart` .. `ncclGroupEnd`, issued by [`Group::launch`].
///
/// Each method checks its call as the communicator's own method does and keeps the borrows of
/// its stream and buffers (`'b`) until the group is launched and its [`Launched`] dropped or
/// waited for. Nothing reaches NCCL before [`launch`](Group::launch): a call refused half-way
/// through building a group leaves nothing enqueued, and dropping an unlaunched group enqueues
/// nothing. A group is not `Send`: NCCL's group state belongs to the thread. It keeps its first
/// four calls inline (a group is about 670 bytes on 64-bit targets), so that a group of up to
/// four calls allocates nothing; later calls go to the heap.
///
/// ```no_run
/// # fn main() -> um_core::Result<()> {
/// use std::time::Duration;
/// use um_core::{Context, Managed, StreamOptions};
/// use um_nccl::{Comm, CommOptions, Group, ReduceOp};
/// let devices = [Context::new(0)?, Context::new(1)?];
/// let comms = Comm::init_all(&devices, CommOptions::new())?;
/// let grads = devices
///     .iter()
///     .map(|ctx| Managed::from_fn_mirrored(ctx, 1024, |i| i as f32))
///     .collect::<um_core::Result<Vec<_>>>()?;
/// let grads = Context::with_stream_set_across(&devices, StreamOptions::new(), |streams| {
///     let mut on: Vec<_> = grads.into_iter().zip(streams).map(|(g, s)| g.attach(s)).collect::<um_core::Result<_>>()?;
///     let mut group = Group::new();
///     for ((comm, s), g) in comms.iter().zip(streams).zip(on.iter_mut()) {
///         group.all_reduce_in_place(comm, s, g, ReduceOp::Sum)?;
///     }
///     group.launch()?.wait(Duration::from_secs(30))?;
///     on.into_iter().zip(streams).map(|(g, s)| s.sync_all(vec![g])).collect::<um_core::Result<Vec<_>>>()
/// })?;
/// # Ok(()) }
/// ```
pub struct Group<'b> {
    /// The first [`INLINE`] calls inline, no allocation; an `Entry` has no drop glue, so the
    /// borrowed buffers may die before the group, and `Group` stays covariant in `'b`
    /// (`crate::list`, `tests/group_lifetimes.rs`).
    calls: List<Entry<'b>, INLINE>,
    _thread: PhantomData<*const ()>,
}

/// How many calls and streams a group and its [`Launched`] keep without allocating.
const INLINE: usize = 4;

/// One call of a group: plain references and numbers, no drop glue (`List`'s dropck relies on
/// it).
struct Entry<'b> {
    comm: &'b Comm,
    stream: &'b dyn Idle,
    call: Call,
}

impl Default for Group<'_> {
    fn default() -> Self {
        Group {
            calls: List::new(),
            _thread: PhantomData,
        }
    }
}

impl std::fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("calls", &self.calls.len())
            .finish()
    }
}

impl<'b> Group<'b> {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many calls the group holds.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether the group holds no call.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    fn push<'s, K: CollectiveStream>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        call: Result<Call>,
    ) -> Result<()> {
        let call = call?;
        self.calls.push(Entry { comm, stream, call });
        phases::lap(0);
        Ok(())
    }

    /// [`Comm::all_reduce`], in this group.
    pub fn all_reduce<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        send: &'b Buf<'s, T, K, M1>,
        recv: &'b mut Buf<'s, T, K, M2>,
        op: ReduceOp,
    ) -> Result<()> {
        self.push(comm, stream, call::all_reduce(comm, stream, send, recv, op))
    }

    /// [`Comm::all_reduce_in_place`], in this group.
    pub fn all_reduce_in_place<'s, T: Element, K: CollectiveStream, M: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        buf: &'b mut Buf<'s, T, K, M>,
        op: ReduceOp,
    ) -> Result<()> {
        self.push(
            comm,
            stream,
            call::all_reduce_in_place(comm, stream, buf, op),
        )
    }

    /// [`Comm::broadcast`], in this group.
    pub fn broadcast<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        send: &'b Buf<'s, T, K, M1>,
        recv: &'b mut Buf<'s, T, K, M2>,
        root: usize,
    ) -> Result<()> {
        self.push(
            comm,
            stream,
            call::broadcast(comm, stream, send, recv, root),
        )
    }

    /// [`Comm::broadcast_in_place`], in this group.
    pub fn broadcast_in_place<'s, T: Element, K: CollectiveStream, M: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        buf: &'b mut Buf<'s, T, K, M>,
        root: usize,
    ) -> Result<()> {
        self.push(
            comm,
            stream,
            call::broadcast_in_place(comm, stream, buf, root),
        )
    }

    /// [`Comm::reduce`], in this group.
    pub fn reduce<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        send: &'b Buf<'s, T, K, M1>,
        recv: &'b mut Buf<'s, T, K, M2>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        self.push(
            comm,
            stream,
            call::reduce(comm, stream, send, recv, op, root),
        )
    }

    /// [`Comm::all_gather`], in this group.
    pub fn all_gather<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        send: &'b Buf<'s, T, K, M1>,
        recv: &'b mut Buf<'s, T, K, M2>,
    ) -> Result<()> {
        self.push(comm, stream, call::all_gather(comm, stream, send, recv))
    }

    /// [`Comm::reduce_scatter`], in this group.
    pub fn reduce_scatter<'s, T: Element, K: CollectiveStream, M1: Storage, M2: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        send: &'b Buf<'s, T, K, M1>,
        recv: &'b mut Buf<'s, T, K, M2>,
        op: ReduceOp,
    ) -> Result<()> {
        self.push(
            comm,
            stream,
            call::reduce_scatter(comm, stream, send, recv, op),
        )
    }

    /// [`Comm::send`], in this group; here `peer` may be the rank itself, if the group also
    /// holds the matching receive.
    pub fn send<'s, T: Element, K: CollectiveStream, M: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        buf: &'b Buf<'s, T, K, M>,
        peer: usize,
    ) -> Result<()> {
        self.push(comm, stream, call::send(comm, stream, buf, peer, true))
    }

    /// [`Comm::recv`], in this group; here `peer` may be the rank itself.
    pub fn recv<'s, T: Element, K: CollectiveStream, M: Storage>(
        &mut self,
        comm: &'b Comm,
        stream: &'b Stream<'s, K>,
        buf: &'b mut Buf<'s, T, K, M>,
        peer: usize,
    ) -> Result<()> {
        self.push(comm, stream, call::recv(comm, stream, buf, peer, true))
    }

    /// Issues every call between `ncclGroupStart` and `ncclGroupEnd`, and returns once NCCL
    /// has enqueued them all. The communicators must all be blocking or all nonblocking (NCCL
    /// refuses a mix); nonblocking ones are waited for within the shortest of their time
    /// limits. If NCCL fails or times out, every communicator of the group is aborted (their
    /// streams poisoned) and the error returned.
    pub fn launch(self) -> Result<Launched<'b>> {
        phases::lap(0);
        um_core::refuse_inside_stream_callback("a group of collectives")?;
        phases::lap(1);
        let Some(first) = self.calls.iter().next() else {
            return Ok(Launched { pairs: List::new() });
        };
        let blocking = first.comm.options().is_blocking();
        let nccl = first.comm.nccl();
        for e in self.calls.iter() {
            e.comm.live()?;
            if e.comm.options().is_blocking() != blocking {
                return Err(Error::InvalidGroup {
                    reason: "blocking and nonblocking communicators cannot share a group (NCCL refuses it)",
                });
            }
        }
        phases::lap(2);
        ledger::record_all(
            self.calls
                .iter()
                .map(|e| (e.comm.ledger(), e.comm.rank(), e.call.channel, e.call.sig)),
        )?;
        phases::lap(3);
        for e in self.calls.iter() {
            e.comm.remember(e.stream);
        }
        phases::lap(4);
        let mut comms: SmallVec<[&Comm; 4]> = SmallVec::new();
        for e in self.calls.iter() {
            if !comms.iter().any(|c| std::ptr::eq(*c, e.comm)) {
                comms.push(e.comm);
            }
        }
        let fail = |err: Error| {
            for c in &comms {
                c.abort_because(err.to_string());
            }
            err
        };
        phases::lap(5);
        // SAFETY: matched by the group end below, on this thread, on every path past it (a
        // start that failed opened no group).
        let started = unsafe { result::group_start(nccl) };
        phases::lap(6);
        started.map_err(&fail)?;
        let mut first_err = None;
        for e in self.calls.iter() {
            // SAFETY: each call was built by `crate::call` for its communicator (live, checked
            // above, and done with its last call: every call and group on it polled a
            // nonblocking one to the end, or aborted it) from a stream and buffers this group
            // borrows for 'b.
            let (_, issued) = unsafe { e.call.issue(nccl, e.comm.raw()) };
            if let Err(err) = issued {
                first_err.get_or_insert(err);
            }
        }
        phases::lap(7);
        // SAFETY: ends the group started above; its calls' buffers and streams are borrowed for
        // 'b.
        let ended = unsafe { result::group_end(nccl) };
        phases::lap(8);
        if let Some(e) = first_err {
            return Err(fail(e));
        }
        match (ended, blocking) {
            (Ok(Progress::Done), true) => {}
            (Ok(_), false) => {
                // The strictest limit of the group's communicators.
                let limit = comms
                    .iter()
                    .map(|c| c.options().time_limit())
                    .min()
                    .unwrap_or_else(|| first.comm.options().time_limit());
                let mut clock = PollClock::new(limit);
                for c in &comms {
                    if let Err(e) = c.poll_ready("ncclGroupEnd", &mut clock) {
                        return Err(fail(e));
                    }
                }
            }
            // A blocking group does not stay in progress.
            (Ok(Progress::InProgress), true) => {
                return Err(fail(nccl.error("ncclGroupEnd", sys::IN_PROGRESS, None)));
            }
            (Err(e), _) => return Err(fail(e)),
        }
        phases::lap(9);
        Ok(Launched {
            pairs: pairs(self.calls.iter()),
        })
    }
}

/// Each communicator of the calls with each stream it enqueued on, once.
fn pairs<'a, 'b: 'a>(calls: impl Iterator<Item = &'a Entry<'b>>) -> Pairs<'b> {
    let mut pairs = Pairs::new();
    for e in calls {
        if !pairs
            .iter()
            .any(|(c, s)| std::ptr::eq(*c, e.comm) && std::ptr::addr_eq(*s, e.stream))
        {
            pairs.push((e.comm, e.stream));
        }
    }
    pairs
}

type Pairs<'b> = List<(&'b Comm, &'b dyn Idle), INLINE>;

/// A launched group: its communicators and streams, still borrowed, to wait for.
pub struct Launched<'b> {
    /// Each communicator of the group with each stream it enqueued on, once, for
    /// [`Launched::wait`].
    pairs: Pairs<'b>,
}

impl std::fmt::Debug for Launched<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launched")
            .field("streams", &self.pairs.len())
            .finish()
    }
}

impl Launched<'_> {
    /// [`Comm::wait`] for every stream of the group at once, with one time limit: on a
    /// timeout or an error every communicator of the group is aborted (their streams poisoned),
    /// also when one of them was found aborted already ([`Error::CommunicatorAborted`]).
    /// Inside a capture closure of `um` (on the capturing thread) it is refused,
    /// [`Error::InsideCapture`], with nothing aborted (unless one was found aborted already)
    /// and no stream poisoned.
    pub fn wait(self, timeout: Duration) -> Result<()> {
        // Inside um's stream callback a wait is refused, not taken for a failure that aborts the
        // communicators; an abort owed or done is reported.
        um_core::refuse_inside_stream_callback("waiting for collectives")?;
        let pairs: SmallVec<[(&Comm, &dyn Idle); INLINE]> = self.pairs.iter().copied().collect();
        for (comm, _) in &pairs {
            if let Err(e) = comm.live() {
                // One communicator of the group was aborted: its peers in the group may wait for
                // it for ever, so they are aborted too, as the documentation says.
                // Aborting an aborted one does nothing.
                for (other, _) in &pairs {
                    other.abort_because(format!("another communicator of its group: {e}"));
                }
                return Err(e);
            }
        }
        // On a capturing thread the stream queries would be refused (and fail the capture):
        // refused here, aborting nothing and poisoning nothing (see `Comm::wait`).
        um_core::refuse_inside_capture("waiting for collectives")?;
        wait_pairs(&pairs, timeout)
    }
}
