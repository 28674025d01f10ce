//! Red team 4, finding 3 (unsafe-contract gap: needs `unsafe`, but the caller keeps every
//! clause of the documented `# Safety`). Not built.
//!
//! `Context::with_foreign_stream`'s `# Safety` says "Nobody begins a stream capture (a CUDA
//! graph) on it while `f` runs". It does not exclude a stream that is *already* capturing when
//! it is passed in, which is the common case in practice: inside PyTorch's
//! `torch.cuda.graph(...)` (or any library's capture), "the current stream" is the capturing
//! stream, and that is the handle a user hands to `um`.
//!
//! `Foreign` is `Eager` (and `BlasStream`, `CollectiveStream`), so `um` treats it as a stream
//! whose work runs:
//! * `um_cublas::Blas::gemm` on it is recorded into the foreign graph: exactly rule 148's hazard
//!   (red team 3, finding 2): every replay uses the handle's workspace, which the graph does not
//!   hold; dropping the `Blas` frees it, and the foreign library replays the graph afterwards;
//! * a safe launcher on it records a kernel node whose function lives in a module of this
//!   `Context`; dropping the last handle unloads the module (after a wait that the open capture
//!   makes fail... or, once the capture has ended, succeeds) while the foreign graph, which
//!   names the function, may still be replayed;
//! * um's buffers are recorded by address into the foreign graph; `sync`'s
//!   `cuStreamSynchronize` fails on a capturing stream, so they are leaked (not freed), which
//!   keeps this half sound.
//!
//! Fix: check it. `cuStreamIsCapturing` (or `cuStreamGetCaptureInfo`) in `with_foreign_stream`,
//! refusing a capturing stream with `Error::InvalidForeignStream { reason: "a stream that is
//! capturing" }`, and word the clause "the stream is not capturing, and nobody begins a capture
//! on it, while `f` runs".

use um::cublas::{Blas, Gemm};
use um::{Context, Managed};

/// `torch_current_stream` is a stream on which another library has begun a capture.
fn gemm_into_a_foreign_graph(ctx: &Context, torch_current_stream: *mut std::ffi::c_void) {
    let blas = Blas::new(ctx).expect("cuBLAS");
    let a = Managed::from_slice(ctx, &[1.0f32; 4]).expect("a");
    let c = Managed::from_slice(ctx, &[0.0f32; 4]).expect("c");
    // SAFETY (as documented): the handle is a live stream of this context, kept alive for the
    // call; nobody else touches um's memory on it; nobody *begins* a capture on it while `f`
    // runs (the capture began before).
    let _ = unsafe {
        ctx.with_foreign_stream(torch_current_stream, |s| {
            let (a, mut c) = (a.attach(s)?, c.attach(s)?);
            let _ = blas.gemm(s, &Gemm::new(2, 2, 2), &a, &a, &mut c); // recorded, not run
            s.sync_all((a, c)).map(drop) // Err: cannot wait on a capturing stream (leaked)
        })
    };
    drop(blas); // the workspace the foreign graph's GEMM node uses is freed here
    // ... the foreign library ends its capture and replays the graph: UB.
}

fn main() {
    let _ = gemm_into_a_foreign_graph;
}
