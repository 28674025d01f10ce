//! RED TEAM 3, candidate C1 (expected: UB from safe code; GPU run needed to see which form).
//!
//! `Managed`'s drop on a capturing thread (`reclaim::defer::bury_eager`) keeps a buffer of an
//! *eager* stream, with a copy of that stream's `RawStream`, for the innermost capture scope;
//! the scope frees it once its capture has ended with `defer_free(ctx, stream, orphan)`:
//! `cuStreamAddCallback(stream.handle, ..)`. Nothing ties the eager stream's life to the
//! capture: a `with_stream` scope opened *inside* the capture closure ends (and
//! `cuStreamDestroy`s its stream) before the capture does. `Completion::enqueue`'s SAFETY
//! comment ("`stream` is alive (its brand is on the buffers the caller holds)") is false here.
//!
//! What the GPU should show:
//! 1. `cuStreamAddCallback` on a destroyed `CUstream`: a use of an invalid handle, undefined in
//!    the driver API (in practice CUDA_ERROR_INVALID_HANDLE or CUDA_ERROR_CONTEXT_IS_DESTROYED,
//!    or a crash in libcuda: the handle is a pointer to a freed driver object). If it errs, the
//!    orphan comes back and is leaked (benign).
//! 2. If the driver has reused the handle for a newer stream (thread 2 below creates streams in
//!    a loop, so the freed handle is recycled quickly), the callback goes on *that* stream,
//!    which may be idle: the reaper frees `x` while `spin_then_add` (2 s, enqueued on the
//!    destroyed stream, which still runs its queued work) is writing it -> GPU use-after-free,
//!    visible under `compute-sanitizer --tool memcheck` or as a wrong value / a fault in the
//!    allocation that reuses the memory.
//!
//! Coherent memory is used because its `attach` makes no driver call, so it is legal on the
//! capturing thread; with unified memory the same happens through a *failed* attach (the
//! `cuStreamAttachMemAsync` is refused in the capture, and `hand_to` drops the buffer as the new
//! stream's, which is also buried with the soon-dead stream). The eager launch on the inner
//! stream during the capture is what `gpu_graphs::eager_work_and_other_threads_go_on_during_a_
//! capture` shows works.
//!
//! Run: `cargo run --example buried_buffer_of_a_dead_stream` (copy to examples/), plain and
//! under `compute-sanitizer --tool memcheck`.
use std::sync::atomic::{AtomicBool, Ordering};
use um::kernels::testing;
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|t| {
        // Thread 2: makes and destroys streams all the time, so that a freed CUstream handle
        // is soon handed out again.
        let ctx3 = ctx.clone();
        let stop = &stop;
        t.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = ctx3.with_stream(StreamOptions::new().non_blocking(), |s2| {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    let _ = s2.id();
                    Ok(())
                });
            }
        });
        let set = Managed::from_slice_coherent(&ctx, &[0.0f32; 256])?;
        let x = Managed::from_slice_coherent(&ctx, &[0.0f32; 1 << 20])?; // host-owned, not in the set
        let r = ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
            let set = set.attach(s)?;
            let ctx2 = ctx.clone();
            let (graph, ()) = s.capture((set,), move |cap, (mut set,)| {
                testing::add_scalar(cap, &mut set, 1.0)?;
                // An eager stream whose scope ends inside the capture closure.
                ctx2.with_stream(StreamOptions::new().non_blocking(), |inner| {
                    let mut x = x.attach(inner)?; // coherent: no driver call
                    testing::spin_then_add(inner, &mut x, 1.0, 2_000_000_000)?; // eager, 2 s
                    drop(x); // capturing thread: bury_eager(ctx, inner.raw(), ..)
                    Ok(())
                })?; // `inner` is cuStreamDestroy'ed here; the kernel keeps running
                std::thread::sleep(std::time::Duration::from_millis(50)); // let thread 2 reuse the handle
                Ok(((set,), ()))
            })?; // capture ends: defer_free(ctx, <dead inner>, x) -> cuStreamAddCallback(dead handle)
            graph.sync().map(drop)
        });
        stop.store(true, Ordering::Relaxed);
        r
    })
}
