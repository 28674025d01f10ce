//! # um-nccl: NCCL collectives on buffers a stream owns
//!
//! NCCL's collectives read and write device memory on a CUDA stream. In `um` a buffer in
//! state `StreamOwned<'s>` is touched only by work on the stream branded `'s`, so that is the
//! stream a collective on it must run on: every collective here takes the [`Stream`] and its
//! buffers, `&` for the ones it reads and `&mut` for the ones it writes, with the same brand.
//! A host-owned buffer, a buffer of another stream, a `&` where NCCL writes, an element type
//! NCCL lacks, the per-thread default stream: each is a compile error. What only the running
//! program knows is an `Err` before anything is enqueued: buffer sizes against the collective's
//! rule (an all-gather's output is world size times its input), roots and peers, the stream's
//! device against the communicator's, and, between ranks of one process, that they call the
//! same collectives with the same sizes.
//!
//! ```no_run
//! # fn main() -> um_core::Result<()> {
//! use std::time::Duration;
//! use um_core::{Context, Managed, StreamOptions};
//! use um_nccl::{Comm, CommOptions, ReduceOp};
//!
//! // One process per GPU, launched by torchrun or SLURM (RANK, WORLD_SIZE, MASTER_ADDR, ...).
//! let comm = Comm::from_env(CommOptions::new())?;
//! let ctx = comm.context().clone();
//! let grad = Managed::from_fn_mirrored(&ctx, 1 << 20, |i| i as f32)?;
//! let grad = ctx.with_stream(StreamOptions::new(), |s| {
//!     let mut grad = grad.attach(s)?;
//!     comm.all_reduce_in_place(s, &mut grad, ReduceOp::Sum)?;
//!     comm.wait(s, Duration::from_secs(60))?; // bounded: a dead peer is an Err, not a hang
//!     grad.sync()
//! })?;
//! println!("{}", grad[1]);
//! # Ok(()) }
//! ```
//!
//! NCCL is loaded at run time ([`nccl`]): building needs nothing, and a machine without it gets
//! [`Error::NcclUnavailable`](um_core::Error::NcclUnavailable) naming what to install.
//!
//! * [`Comm`]: one rank. [`Comm::init_all`] makes one per device of this process,
//!   [`Comm::init_rank`] one per process from a [`UniqueId`], and [`Comm::from_env`] does the
//!   latter with [`Bootstrap`] (torchrun/SLURM variables, the id over TCP from rank 0).
//!   `Send`, not `Sync`: one thread at a time.
//! * [`Group`]: several calls between `ncclGroupStart` and `ncclGroupEnd`, for one thread that
//!   drives several GPUs, or sends and receives at once.
//! * [`Comm::wait`] and [`Launched::wait`]: a wait with a time limit that watches NCCL's
//!   asynchronous errors and aborts the communicator on a timeout or an error, poisoning its
//!   streams so that every buffer an aborted collective may still touch is leaked, never freed.
//!
//! **Which memory.** Every storage works. For speed, give NCCL device-resident buffers: a
//! mirror (its device half) or coherent memory. Measured on 2× H200 with NCCL 2.28.3
//! (`benches/nccl_probe.rs`, 2026-11-22): once unified memory (`Managed::zeroed_slice`, say)
//! had been used on the device, by one collective or by a kernel alone, every later collective
//! of the process ran about 9x slower at small sizes, on any memory (1 MiB: 118 to 139 µs a
//! step instead of 13.5 to 22.7). Coherent memory, managed memory too but attached globally
//! instead of to a stream, did not do this. Why is not known yet.
//!
//! **Feature `phase-timing`** (off by default): `phases`, the time-stamp counter read between
//! the phases of a [`Group`]'s calls and [`Group::launch`], for `bench/nccl_probe_phases` (where a step's host time
//! goes). Without it those reads compile to nothing.
//!
//! The rules and the tests that show them are in [`docs/rules.md`](https://github.com/um-rs/um/blob/main/docs/rules.md) (rows 150 to 166), the design in
//! [`docs/design.md`](https://github.com/um-rs/um/blob/main/docs/design.md) ("NCCL") and [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md).
//!
//! [`Stream`]: um_core::Stream

mod bootstrap;
mod call;
mod check;
mod comm;
mod group;
mod ledger;
#[cfg(test)]
mod ledger_model;
mod list;
#[cfg(feature = "phase-timing")]
pub mod phases;
#[cfg(not(feature = "phase-timing"))]
mod phases;
mod poll;
mod result;
mod sys;
mod types;

mod sealed {
    /// The supertrait that keeps [`Element`](crate::Element) closed.
    pub trait Sealed {}
}

pub use bootstrap::Bootstrap;
pub use comm::{Comm, CommOptions};
pub use group::{Group, Launched};
pub use sys::{MIN_VERSION, Nccl, nccl};
pub use types::{CollectiveStream, Element, ReduceOp, UniqueId};

// The thread rules, checked at compile time. Their other halves, `Comm: !Sync` and
// `Group: !Send`, are compile-fail tests (`tests/ui/nccl/comm_shared_between_threads`,
// `group_sent_to_another_thread`).
mod facts {
    use super::*;

    const fn is_send<T: Send>() {}
    const _: () = is_send::<Comm>();
    const _: () = is_send::<UniqueId>();
    const _: () = is_send::<Bootstrap>();
}
