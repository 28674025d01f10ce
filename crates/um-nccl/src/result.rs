//! The checked layer: each NCCL entry point of [`Fns`](crate::sys::Fns) as a function that
//! returns a [`Result`], an error code turned into `Error::Nccl` with NCCL's text. The only file
//! that calls an entry point, but for `sys.rs`, which loads the library, asks its version and
//! reads NCCL's error texts. Each `unsafe fn` says what its caller guarantees; none checks
//! `um`'s rules, which `comm.rs`, `group.rs` and `call.rs` do.

use std::ffi::{c_int, c_void};

use um_core::Result;

use crate::sys::{self, Config, Nccl, RawComm, RawStream, RawUniqueId, UNIQUE_ID_BYTES};

/// What a call that NCCL accepted came to: done, or still being worked on by NCCL's thread (a
/// nonblocking communicator's `ncclInProgress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    Done,
    InProgress,
}

/// `rc` of `call` as a [`Progress`], or its error (with `comm`'s last error message, given one).
fn progress(nccl: &Nccl, call: &'static str, rc: i32, comm: Option<RawComm>) -> Result<Progress> {
    match rc {
        sys::SUCCESS => Ok(Progress::Done),
        sys::IN_PROGRESS => Ok(Progress::InProgress),
        e => Err(nccl.error(call, e, comm)),
    }
}

/// `ncclGetUniqueId`: a fresh id, naming a bootstrap endpoint in this process.
pub(crate) fn get_unique_id(nccl: &Nccl) -> Result<RawUniqueId> {
    let mut raw = RawUniqueId {
        internal: [0; UNIQUE_ID_BYTES],
    };
    // SAFETY: a valid out-pointer to a 128-byte ncclUniqueId.
    let rc = unsafe { (nccl.fns.get_unique_id)(&mut raw) };
    match rc {
        sys::SUCCESS => Ok(raw),
        e => Err(nccl.error("ncclGetUniqueId", e, None)),
    }
}

/// `ncclCommInitRankConfig`: rank `rank` of `world` ranks named by `id`, on the current
/// context's device, written to `raw` (which NCCL may set even where the call fails, and must
/// then be aborted).
///
/// # Safety
/// `rank < world`; `config` stays alive and unmoved until the creation is done (polled to the
/// end on a nonblocking communicator, or the group it was made in has ended); the device of
/// the rank is the current context's.
pub(crate) unsafe fn comm_init_rank_config(
    nccl: &Nccl,
    raw: &mut RawComm,
    world: c_int,
    id: RawUniqueId,
    rank: c_int,
    config: &mut Config,
) -> Result<Progress> {
    // SAFETY: valid out-pointer and config (the caller keeps it alive); the caller's guarantees.
    let rc = unsafe { (nccl.fns.comm_init_rank_config)(raw, world, id, rank, config) };
    progress(nccl, "ncclCommInitRankConfig", rc, None)
}

/// `ncclCommGetAsyncError`: NCCL's state of the communicator, `ncclSuccess`, `ncclInProgress`
/// or an error code; `Err` where the query itself fails.
///
/// # Safety
/// `comm` is a communicator NCCL returned and that has not been destroyed or aborted.
pub(crate) unsafe fn comm_get_async_error(nccl: &Nccl, comm: RawComm) -> Result<i32> {
    let mut state: i32 = sys::IN_PROGRESS;
    // SAFETY: the caller's guarantee; a valid out-pointer.
    let rc = unsafe { (nccl.fns.comm_get_async_error)(comm, &mut state) };
    match rc {
        sys::SUCCESS => Ok(state),
        e => Err(nccl.error("ncclCommGetAsyncError", e, Some(comm))),
    }
}

/// `ncclCommFinalize`: flushes the communicator's work (nonblocking: polled with
/// [`comm_get_async_error`] until done).
///
/// # Safety
/// As [`comm_get_async_error`], finalized once.
pub(crate) unsafe fn comm_finalize(nccl: &Nccl, comm: RawComm) -> Result<Progress> {
    // SAFETY: the caller's guarantee.
    let rc = unsafe { (nccl.fns.comm_finalize)(comm) };
    progress(nccl, "ncclCommFinalize", rc, Some(comm))
}

/// `ncclCommDestroy`.
///
/// # Safety
/// As [`comm_get_async_error`]; its work flushed; never used again.
pub(crate) unsafe fn comm_destroy(nccl: &Nccl, comm: RawComm) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let rc = unsafe { (nccl.fns.comm_destroy)(comm) };
    progress(nccl, "ncclCommDestroy", rc, None).map(|_| ())
}

/// `ncclCommAbort`: stops the communicator's work and frees it.
///
/// # Safety
/// `comm` is a communicator NCCL returned (its creation may have failed or still run), aborted
/// once and never used again.
pub(crate) unsafe fn comm_abort(nccl: &Nccl, comm: RawComm) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let rc = unsafe { (nccl.fns.comm_abort)(comm) };
    progress(nccl, "ncclCommAbort", rc, None).map(|_| ())
}

/// `ncclGroupStart`.
///
/// # Safety
/// Matched by [`group_end`] on every path.
pub(crate) unsafe fn group_start(nccl: &Nccl) -> Result<()> {
    // SAFETY: no arguments; the caller's guarantee.
    let rc = unsafe { (nccl.fns.group_start)() };
    progress(nccl, "ncclGroupStart", rc, None).map(|_| ())
}

/// `ncclGroupEnd`: issues the calls made since the matching [`group_start`].
///
/// # Safety
/// Ends a group that [`group_start`] began, whose calls' buffers and streams are still
/// borrowed by the caller.
pub(crate) unsafe fn group_end(nccl: &Nccl) -> Result<Progress> {
    // SAFETY: the caller's guarantee.
    let rc = unsafe { (nccl.fns.group_end)() };
    progress(nccl, "ncclGroupEnd", rc, None)
}

/// Which collective or point-to-point call, with its reduction, root or peer (NCCL's raw
/// values).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    AllReduce(i32),
    Broadcast(i32),
    Reduce(i32, i32),
    AllGather,
    ReduceScatter(i32),
    Send(i32),
    Recv(i32),
}

impl Kind {
    /// The entry point's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::AllReduce(_) => "ncclAllReduce",
            Kind::Broadcast(_) => "ncclBroadcast",
            Kind::Reduce(..) => "ncclReduce",
            Kind::AllGather => "ncclAllGather",
            Kind::ReduceScatter(_) => "ncclReduceScatter",
            Kind::Send(_) => "ncclSend",
            Kind::Recv(_) => "ncclRecv",
        }
    }
}

/// The arguments of one collective or point-to-point call, as NCCL takes them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Collective {
    pub(crate) kind: Kind,
    pub(crate) send: *const c_void,
    pub(crate) recv: *mut c_void,
    pub(crate) count: usize,
    pub(crate) dtype: i32,
    pub(crate) stream: RawStream,
}

/// Issues `op` on `comm` (`ncclAllReduce`, `ncclBroadcast`, `ncclReduce`, `ncclAllGather`,
/// `ncclReduceScatter`, `ncclSend` or `ncclRecv`).
///
/// # Safety
/// `comm` is live; `send` and `recv` address buffers of at least the elements NCCL reads and
/// writes for this call at `count` of `dtype`, on the stream `stream` of the communicator's
/// device, alive and not otherwise used until the stream has run the call; roots and peers are
/// ranks of `comm`.
pub(crate) unsafe fn collective(nccl: &Nccl, op: &Collective, comm: RawComm) -> Result<Progress> {
    let fns = &nccl.fns;
    let (s, r, n, t, st) = (op.send, op.recv, op.count, op.dtype, op.stream);
    // SAFETY: (every arm) the caller's guarantees.
    let rc = unsafe {
        match op.kind {
            Kind::AllReduce(o) => (fns.all_reduce)(s, r, n, t, o, comm, st),
            Kind::Broadcast(root) => (fns.broadcast)(s, r, n, t, root, comm, st),
            Kind::Reduce(o, root) => (fns.reduce)(s, r, n, t, o, root, comm, st),
            Kind::AllGather => (fns.all_gather)(s, r, n, t, comm, st),
            Kind::ReduceScatter(o) => (fns.reduce_scatter)(s, r, n, t, o, comm, st),
            Kind::Send(peer) => (fns.send)(s, n, t, peer, comm, st),
            Kind::Recv(peer) => (fns.recv)(r, n, t, peer, comm, st),
        }
    };
    progress(nccl, op.kind.name(), rc, Some(comm))
}
