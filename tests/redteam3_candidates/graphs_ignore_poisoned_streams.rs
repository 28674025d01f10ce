//! RED TEAM 3, candidate C3: graphs do not honour poisoned streams (rule 164).
//!
//! Rule 164 (docs/rules.md): "the communicator poisons its streams before the abort; their
//! buffers are leaked at drop, `sync`, `hand_off`, launches and attaches return
//! `Error::StreamPoisoned`". The graph layer misses three of these:
//!
//! (a) `Graph::launch` (exec.rs) never calls `check_not_poisoned`: a replay is enqueued on a
//!     poisoned stream and writes buffers that an aborted collective (or a peer GPU that NCCL's
//!     P2P transport gave their address) may still be writing: a GPU data race.
//!     `Stream::capture` (capture.rs, `Scope::begin`) does not check either.
//! (b) `CaptureSet::to_host` (state.rs, used by `Graph::sync` and `Graph::host`) checks the
//!     poison before the wait (in `release_to_host`) but not after `cuStreamSynchronize`, unlike
//!     `sync` and `sync_group` ("Poisoned during the wait: the stream may be idle only because
//!     its work was aborted"). A `Comm::abort` on another thread during `graph.sync()` makes
//!     the stream idle and hands the buffers to the CPU while a peer may still write them.
//! (c) A buffer of the set dropped inside the capture closure is buried without
//!     `.watching(owner's poison)` (managed.rs `Drop`, `S::IN_CAPTURE` branch: its
//!     `alloc.stream` is then the *capture* stream, whose flag is never set) and freed by
//!     `free_buried` behind a callback on the owner stream even if that stream was poisoned
//!     meanwhile: a free of memory an aborted collective may still touch.
//!
//! Part (a) needs no NCCL to be seen: `s.poisoner().poison()` is safe, and then
//! `graph.launch(s)` returns `Ok(())` (expected: `Err(StreamPoisoned)`). The UB form needs two
//! GPUs: `comm.all_reduce_in_place(s, &mut x)` with a peer rank that never joins, then
//! `s.capture((x,), ..)` without a wait, then `comms[0].abort()` (poisons `s`, aborts) and
//! `graph.launch(s)` / `graph.sync()` -> x written by the replay / read by the CPU while the
//! peer's P2P kernel may still write it.
use um::kernels::testing;
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let x = Managed::from_slice_coherent(&ctx, &[0.0f32; 1024])?;
    ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            testing::add_scalar(cap, &mut x, 1.0)?;
            Ok(((x,), ()))
        })?;
        s.poisoner().poison(); // what um-nccl does before ncclCommAbort
        let replay = graph.launch(s);
        println!("graph.launch on a poisoned stream: {replay:?} (rule 164 says StreamPoisoned)");
        assert!(replay.is_ok(), "fixed: the replay is refused");
        // A plain launch on the same stream is refused:
        let y = Managed::from_slice_coherent(&ctx, &[0.0f32; 4])?;
        let refused = y.attach(s).map(drop);
        println!("attach on the poisoned stream: {refused:?}");
        let _ = graph.sync(); // Err(StreamPoisoned) here: release_to_host checks before the wait
        Ok(())
    })
}
