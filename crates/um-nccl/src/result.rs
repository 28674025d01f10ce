//! The checked layer: each NCCL entry point of [`Fns`](crate::sys::Fns) as a function that
//! returns a [`Result`], an error code turned into `Error::Nccl` with NCCL's text. The only file
//! that calls an entry point, but for `sys.rs`, which loads the library, asks its version and
//! reads NCCL's error texts. Each `unsafe fn` says what its caller guarantees, and every one
//! that takes a communicator also needs that no other thread uses it during the call (rule
//! 158); none checks `um`'s rules, which `comm.rs`, `group.rs` and `call.rs` do.

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
/// As [`comm_get_async_error`], finalized once; on a nonblocking communicator NCCL is done with
/// its previous call (no longer `ncclInProgress`).
pub(crate) unsafe fn comm_finalize(nccl: &Nccl, comm: RawComm) -> Result<Progress> {
    // SAFETY: the caller's guarantee.
    let rc = unsafe { (nccl.fns.comm_finalize)(comm) };
    progress(nccl, "ncclCommFinalize", rc, Some(comm))
}

/// `ncclCommDestroy`. Its error is built without the communicator's last error (the
/// communicator is gone).
///
/// # Safety
/// As [`comm_get_async_error`]; no call of it still `ncclInProgress` (a finalize polled to its
/// end; NCCL finalizes one that was not, as a blocking communicator's drop leaves it); never
/// used again.
pub(crate) unsafe fn comm_destroy(nccl: &Nccl, comm: RawComm) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let rc = unsafe { (nccl.fns.comm_destroy)(comm) };
    progress(nccl, "ncclCommDestroy", rc, None).map(|_| ())
}

/// `ncclCommAbort`: stops the communicator's work and frees it. Its error is built without the
/// communicator's last error (the communicator is gone).
///
/// # Safety
/// `comm` is a communicator NCCL returned (its creation may have failed or still run), aborted
/// once and never used again.
pub(crate) unsafe fn comm_abort(nccl: &Nccl, comm: RawComm) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let rc = unsafe { (nccl.fns.comm_abort)(comm) };
    progress(nccl, "ncclCommAbort", rc, None).map(|_| ())
}

/// `ncclGroupStart`. Only `ncclSuccess` opens a group: it is never in progress, and any other
/// code (`ncclInProgress` included) is an error, with no group to end.
///
/// # Safety
/// Matched by [`group_end`] on this thread on every path.
pub(crate) unsafe fn group_start(nccl: &Nccl) -> Result<()> {
    // SAFETY: no arguments; the caller's guarantee.
    let rc = unsafe { (nccl.fns.group_start)() };
    match rc {
        sys::SUCCESS => Ok(()),
        e => Err(nccl.error("ncclGroupStart", e, None)),
    }
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
/// `comm` is live and, if nonblocking, NCCL is done with its last call before this one's group
/// (no longer `ncclInProgress`); `send` and `recv` address buffers of at least the elements
/// NCCL reads and writes for this call at `count` of `dtype`, on the stream `stream` of the
/// communicator's device, alive and not otherwise used until the stream has run the call;
/// roots and peers are ranks of `comm`.
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

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::ffi::c_char;

    use super::*;
    use crate::sys::Fns;

    thread_local! {
        /// What every stand-in entry point returns on this thread.
        static RC: Cell<i32> = const { Cell::new(sys::SUCCESS) };
        /// How often `ncclGetLastError` was asked on this thread.
        static LAST_ERROR_ASKED: Cell<u32> = const { Cell::new(0) };
    }

    fn rc() -> i32 {
        RC.with(Cell::get)
    }

    extern "C" fn version(v: *mut c_int) -> i32 {
        // SAFETY: the layer passes a valid out-pointer.
        unsafe { *v = 22803 };
        sys::SUCCESS
    }
    extern "C" fn unique_id(_: *mut RawUniqueId) -> i32 {
        rc()
    }
    extern "C" fn init(_: *mut RawComm, _: c_int, _: RawUniqueId, _: c_int, _: *mut Config) -> i32 {
        rc()
    }
    extern "C" fn on_comm(_: RawComm) -> i32 {
        rc()
    }
    extern "C" fn async_error(_: RawComm, state: *mut i32) -> i32 {
        // SAFETY: the layer passes a valid out-pointer.
        unsafe { *state = sys::SUCCESS };
        rc()
    }
    extern "C" fn error_string(_: i32) -> *const c_char {
        c"stand-in error".as_ptr()
    }
    extern "C" fn last_error(_: RawComm) -> *const c_char {
        LAST_ERROR_ASKED.with(|n| n.set(n.get() + 1));
        c"stand-in last error".as_ptr()
    }
    extern "C" fn group() -> i32 {
        rc()
    }
    type Coll =
        extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, RawStream) -> i32;
    extern "C" fn coll(
        _: *const c_void,
        _: *mut c_void,
        _: usize,
        _: c_int,
        _: c_int,
        _: RawComm,
        _: RawStream,
    ) -> i32 {
        rc()
    }
    extern "C" fn reduce(
        _: *const c_void,
        _: *mut c_void,
        _: usize,
        _: c_int,
        _: c_int,
        _: c_int,
        _: RawComm,
        _: RawStream,
    ) -> i32 {
        rc()
    }
    extern "C" fn gather(
        _: *const c_void,
        _: *mut c_void,
        _: usize,
        _: c_int,
        _: RawComm,
        _: RawStream,
    ) -> i32 {
        rc()
    }
    extern "C" fn send(
        _: *const c_void,
        _: usize,
        _: c_int,
        _: c_int,
        _: RawComm,
        _: RawStream,
    ) -> i32 {
        rc()
    }
    extern "C" fn recv(
        _: *mut c_void,
        _: usize,
        _: c_int,
        _: c_int,
        _: RawComm,
        _: RawStream,
    ) -> i32 {
        rc()
    }

    /// A library whose every entry point answers [`RC`].
    fn stand_in() -> Nccl {
        let c: Coll = coll;
        Nccl::stand_in(Fns {
            get_version: version,
            get_unique_id: unique_id,
            comm_init_rank_config: init,
            comm_finalize: on_comm,
            comm_destroy: on_comm,
            comm_abort: on_comm,
            comm_get_async_error: async_error,
            get_error_string: error_string,
            get_last_error: last_error,
            group_start: group,
            group_end: group,
            all_reduce: c,
            broadcast: c,
            reduce,
            all_gather: gather,
            reduce_scatter: c,
            send,
            recv,
        })
    }

    /// A communicator for the stand-in (never dereferenced).
    const COMM: RawComm = std::ptr::dangling_mut::<u8>().cast();

    fn all_reduce() -> Collective {
        Collective {
            kind: Kind::AllReduce(0),
            send: std::ptr::null(),
            recv: std::ptr::null_mut(),
            count: 1,
            dtype: 7,
            stream: std::ptr::null_mut(),
        }
    }

    /// What each entry point's `rc` comes to: `Some(progress)`, or `None` for an error.
    fn outcomes(nccl: &Nccl, rc: i32) -> Vec<(&'static str, Option<Progress>)> {
        RC.with(|c| c.set(rc));
        let mut raw: RawComm = std::ptr::null_mut();
        let mut config = Config::new(false);
        let id = RawUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        let done = |r: Result<()>| r.ok().map(|()| Progress::Done);
        // SAFETY: the stand-in reads no argument.
        unsafe {
            vec![
                ("ncclGetUniqueId", done(get_unique_id(nccl).map(drop))),
                (
                    "ncclCommInitRankConfig",
                    comm_init_rank_config(nccl, &mut raw, 1, id, 0, &mut config).ok(),
                ),
                (
                    "ncclCommGetAsyncError",
                    done(comm_get_async_error(nccl, COMM).map(drop)),
                ),
                ("ncclCommFinalize", comm_finalize(nccl, COMM).ok()),
                ("ncclGroupStart", done(group_start(nccl))),
                ("ncclGroupEnd", group_end(nccl).ok()),
                ("ncclAllReduce", collective(nccl, &all_reduce(), COMM).ok()),
            ]
        }
    }

    /// `ncclInProgress` is progress only where NCCL may still be working on an accepted call
    /// (a creation, a finalize, a group's end, a collective: the callers poll a nonblocking
    /// communicator, and refuse it from a blocking one); from a group's start, an id or the
    /// state query itself it is an error, as any other code is everywhere.
    #[test]
    fn in_progress_is_progress_only_where_nccl_may_still_work_on_the_call() {
        let nccl = stand_in();
        let in_progress = outcomes(&nccl, sys::IN_PROGRESS);
        let expect = [
            ("ncclGetUniqueId", None),
            ("ncclCommInitRankConfig", Some(Progress::InProgress)),
            ("ncclCommGetAsyncError", None),
            ("ncclCommFinalize", Some(Progress::InProgress)),
            ("ncclGroupStart", None),
            ("ncclGroupEnd", Some(Progress::InProgress)),
            ("ncclAllReduce", Some(Progress::InProgress)),
        ];
        assert_eq!(in_progress, expect);
        for (call, got) in outcomes(&nccl, sys::SUCCESS) {
            assert_eq!(got, Some(Progress::Done), "{call}");
        }
        for (call, got) in outcomes(&nccl, 3) {
            assert_eq!(got, None, "{call}: ncclInternalError is an error");
        }
    }

    /// A group start that NCCL answers with `ncclInProgress` opened no group: an error that
    /// names the call and the code, so that no caller issues calls into it or ends it.
    #[test]
    fn a_group_start_in_progress_is_an_error() {
        let nccl = stand_in();
        RC.with(|c| c.set(sys::IN_PROGRESS));
        // SAFETY: the stand-in keeps no group.
        let err = unsafe { group_start(&nccl) }.expect_err("not a group");
        assert!(
            matches!(
                err,
                um_core::Error::Nccl {
                    call: "ncclGroupStart",
                    code: sys::IN_PROGRESS,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// The error of a destroy or an abort never asks the communicator for its last error: it
    /// is gone when the call returns. A collective's error does (its communicator is live).
    #[test]
    fn destroy_and_abort_errors_ask_no_gone_communicator_for_its_last_error() {
        let nccl = stand_in();
        RC.with(|c| c.set(3));
        let asked = || LAST_ERROR_ASKED.with(Cell::get);
        let before = asked();
        // SAFETY: the stand-in reads no argument.
        let (destroyed, aborted) = unsafe { (comm_destroy(&nccl, COMM), comm_abort(&nccl, COMM)) };
        assert!(destroyed.is_err() && aborted.is_err());
        assert_eq!(
            asked(),
            before,
            "ncclGetLastError on a destroyed or aborted communicator"
        );
        // SAFETY: as above.
        let err = unsafe { collective(&nccl, &all_reduce(), COMM) }.expect_err("an error");
        assert_eq!(
            asked(),
            before + 1,
            "a live communicator's error has its last error"
        );
        assert!(err.to_string().contains("stand-in last error"), "{err}");
    }
}
