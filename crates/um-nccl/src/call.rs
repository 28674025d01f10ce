//! One NCCL call, checked and ready to issue: what the typed methods of [`Comm`] and
//! [`Group`](crate::Group) build from buffers, and the one place that calls NCCL's collectives.
//!
//! A [`Call`] exists only after every check the types cannot make: the stream is of the
//! communicator's device, every buffer is owned by that stream, the storage may be touched by
//! NCCL there, the counts follow from the buffers' lengths by the collective's rule, and roots
//! and peers are ranks. What it holds (addresses, counts) is therefore valid for as long as the
//! borrows of the buffers and the stream that built it, which the builders' callers keep.

use std::ffi::c_void;

use um_core::{Error, Managed, Result, Storage, Stream, StreamKind, StreamOwned};

use crate::check;
use crate::comm::Comm;
use crate::ledger::{Channel, Sig};
use crate::result::{self, Collective, Kind, Progress};
use crate::sys::{Nccl, RawComm, RawStream};
use crate::types::{Element, ReduceOp};

/// A checked call (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Call {
    kind: Kind,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: i32,
    stream: RawStream,
    pub(crate) channel: Channel,
    pub(crate) sig: Sig,
}

impl Call {
    /// Issues the call on `comm`: the NCCL entry point's name and what it came to.
    ///
    /// # Safety
    /// The buffers and the stream this call was built from are still borrowed by the caller
    /// (alive, owned by the stream, not touched by anything else), and `comm` is the live
    /// communicator it was built for, which, if nonblocking, NCCL is done with (its last call
    /// before this call's group no longer `ncclInProgress`).
    pub(crate) unsafe fn issue(
        &self,
        nccl: &Nccl,
        comm: RawComm,
    ) -> (&'static str, Result<Progress>) {
        let op = Collective {
            kind: self.kind,
            send: self.send,
            recv: self.recv,
            count: self.count,
            dtype: self.dtype,
            stream: self.stream,
        };
        // SAFETY: `send` and `recv` address buffers of at least the elements NCCL reads and
        // writes for this collective at `count` (the rules of `check`), owned by the stream of
        // the communicator's device, alive and not otherwise used while the borrows last, and a
        // live communicator done with its last call (the caller's guarantee); roots and peers
        // are ranks of `comm`.
        (self.kind.name(), unsafe {
            result::collective(nccl, &op, comm)
        })
    }
}

/// A stream-owned buffer of `T`, of storage `M`, owned by the stream branded `'s`.
pub(crate) type Buf<'s, T, K, M> = Managed<[T], StreamOwned<'s, K>, M>;

/// The checks every buffer passes: owned by `stream` (the brand says so unless the stream is
/// one of a set), and of a storage NCCL may touch on the communicator's device.
fn owned<'s, T, K: StreamKind, M: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    buf: &Buf<'s, T, K, M>,
    argument: usize,
) -> Result<()> {
    if !stream.owns(buf) {
        return Err(Error::StreamMismatch { argument });
    }
    if M::STREAM_ASSOCIATED && !comm.context().info().concurrent_managed_access {
        return Err(Error::CollectiveStorage {
            device: comm.device(),
        });
    }
    Ok(())
}

fn sig<T: Element>(kind: &'static str, count: usize, op: Option<i32>, root: Option<usize>) -> Sig {
    Sig {
        kind,
        dtype: T::NAME,
        count,
        op,
        root,
    }
}

fn read<T, K: StreamKind, M: Storage>(buf: &Buf<'_, T, K, M>) -> *const c_void {
    buf.as_device_ptr().address() as usize as *const c_void
}

fn write<T, K: StreamKind, M: Storage>(buf: &mut Buf<'_, T, K, M>) -> *mut c_void {
    // Marks a mirror written: its next `sync` copies the device half back.
    buf.as_device_ptr_mut().address() as usize as *mut c_void
}

pub(crate) fn all_reduce<'s, T: Element, K: StreamKind, M1: Storage, M2: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    send: &Buf<'s, T, K, M1>,
    recv: &mut Buf<'s, T, K, M2>,
    op: ReduceOp,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, send, 0)?;
    owned(comm, stream, recv, 1)?;
    let count = check::same_len("all_reduce", send.len(), recv.len())?;
    Ok(Call {
        kind: Kind::AllReduce(op.raw()),
        send: read(send),
        recv: write(recv),
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Collective,
        sig: sig::<T>("all_reduce", count, Some(op.raw()), None),
    })
}

pub(crate) fn all_reduce_in_place<'s, T: Element, K: StreamKind, M: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    buf: &mut Buf<'s, T, K, M>,
    op: ReduceOp,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, buf, 0)?;
    let count = buf.len();
    let p = write(buf);
    Ok(Call {
        kind: Kind::AllReduce(op.raw()),
        send: p.cast_const(),
        recv: p,
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Collective,
        sig: sig::<T>("all_reduce", count, Some(op.raw()), None),
    })
}

pub(crate) fn broadcast<'s, T: Element, K: StreamKind, M1: Storage, M2: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    send: &Buf<'s, T, K, M1>,
    recv: &mut Buf<'s, T, K, M2>,
    root: usize,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, send, 0)?;
    owned(comm, stream, recv, 1)?;
    let count = check::same_len("broadcast", send.len(), recv.len())?;
    let raw_root = check::root("broadcast", root, comm.rank(), comm.world_size())?;
    Ok(Call {
        kind: Kind::Broadcast(raw_root),
        send: read(send),
        recv: write(recv),
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Collective,
        sig: sig::<T>("broadcast", count, None, Some(root)),
    })
}

pub(crate) fn broadcast_in_place<'s, T: Element, K: StreamKind, M: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    buf: &mut Buf<'s, T, K, M>,
    root: usize,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, buf, 0)?;
    let raw_root = check::root("broadcast", root, comm.rank(), comm.world_size())?;
    let count = buf.len();
    let p = write(buf);
    Ok(Call {
        kind: Kind::Broadcast(raw_root),
        send: p.cast_const(),
        recv: p,
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Collective,
        sig: sig::<T>("broadcast", count, None, Some(root)),
    })
}

pub(crate) fn reduce<'s, T: Element, K: StreamKind, M1: Storage, M2: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    send: &Buf<'s, T, K, M1>,
    recv: &mut Buf<'s, T, K, M2>,
    op: ReduceOp,
    root: usize,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, send, 0)?;
    owned(comm, stream, recv, 1)?;
    let count = check::same_len("reduce", send.len(), recv.len())?;
    let raw_root = check::root("reduce", root, comm.rank(), comm.world_size())?;
    Ok(Call {
        kind: Kind::Reduce(op.raw(), raw_root),
        send: read(send),
        recv: write(recv),
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Collective,
        sig: sig::<T>("reduce", count, Some(op.raw()), Some(root)),
    })
}

pub(crate) fn all_gather<'s, T: Element, K: StreamKind, M1: Storage, M2: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    send: &Buf<'s, T, K, M1>,
    recv: &mut Buf<'s, T, K, M2>,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, send, 0)?;
    owned(comm, stream, recv, 1)?;
    let count = check::all_gather(send.len(), recv.len(), comm.world_size())?;
    Ok(Call {
        kind: Kind::AllGather,
        send: read(send),
        recv: write(recv),
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Collective,
        sig: sig::<T>("all_gather", count, None, None),
    })
}

pub(crate) fn reduce_scatter<'s, T: Element, K: StreamKind, M1: Storage, M2: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    send: &Buf<'s, T, K, M1>,
    recv: &mut Buf<'s, T, K, M2>,
    op: ReduceOp,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, send, 0)?;
    owned(comm, stream, recv, 1)?;
    let count = check::reduce_scatter(send.len(), recv.len(), comm.world_size())?;
    Ok(Call {
        kind: Kind::ReduceScatter(op.raw()),
        send: read(send),
        recv: write(recv),
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Collective,
        sig: sig::<T>("reduce_scatter", count, Some(op.raw()), None),
    })
}

pub(crate) fn send<'s, T: Element, K: StreamKind, M: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    buf: &Buf<'s, T, K, M>,
    peer: usize,
    in_group: bool,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, buf, 0)?;
    let raw_peer = check::peer("send", peer, comm.rank(), comm.world_size(), in_group)?;
    let count = buf.len();
    Ok(Call {
        kind: Kind::Send(raw_peer),
        send: read(buf),
        recv: std::ptr::null_mut(),
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Send {
            src: comm.rank(),
            dst: peer,
        },
        sig: sig::<T>("send/recv", count, None, None),
    })
}

pub(crate) fn recv<'s, T: Element, K: StreamKind, M: Storage>(
    comm: &Comm,
    stream: &Stream<'s, K>,
    buf: &mut Buf<'s, T, K, M>,
    peer: usize,
    in_group: bool,
) -> Result<Call> {
    comm.check_stream(stream)?;
    owned(comm, stream, buf, 0)?;
    let raw_peer = check::peer("recv", peer, comm.rank(), comm.world_size(), in_group)?;
    let count = buf.len();
    Ok(Call {
        kind: Kind::Recv(raw_peer),
        send: std::ptr::null(),
        recv: write(buf),
        count,
        dtype: T::DATATYPE,
        stream: stream.as_raw(),
        channel: Channel::Recv {
            src: peer,
            dst: comm.rank(),
        },
        sig: sig::<T>("send/recv", count, None, None),
    })
}
