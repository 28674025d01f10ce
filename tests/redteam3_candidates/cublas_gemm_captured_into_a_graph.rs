//! RED TEAM 3, candidate C2 (expected: suspect, GPU needed; UB from safe code if cuBLAS's
//! captured GEMM uses the handle's workspace).
//!
//! `Blas::gemm`/`gemv` take `K: StreamKind`, so they accept a `Stream<'c, Capture>` and
//! capture-stream buffers: the GEMM is *recorded* into the graph, not run. docs/interop.md
//! allows foreign work on a capture stream only if it "may use their addresses (as above) and
//! nothing else" -- but a cuBLAS GEMM also uses the handle's workspace (cuBLAS 12+/13 route
//! many GEMMs through cublasLt kernels with split-K reductions in the workspace). The recorded
//! kernel nodes keep that workspace address. Nothing ties the workspace to the `Graph`:
//!
//! (a) `drop(blas)` runs `cublasDestroy_v2`, which frees the workspace; every later
//!     `graph.launch(s)` replays kernels that read/write freed device memory (GPU
//!     use-after-free), possibly memory that a later allocation (`y2` below) now owns.
//! (b) Without the drop: rule 146 ("one handle's calls on several streams never share workspace
//!     memory at once") is kept by a `cuCtxSynchronize` when the handle *moves* between streams,
//!     but a replay is not a call of the handle: `blas.gemm(s2, ..)` followed by
//!     `graph.launch(s)` runs two GEMMs on one workspace at once (a GPU data race -> wrong C).
//!
//! If cuBLAS instead allocates the workspace *inside* the graph (cudaMallocAsync nodes, as it
//! does in some 12.x versions when capturing), (a) and (b) are sound; which one holds on
//! cuBLAS 13 is what the GPU run must tell (`compute-sanitizer --tool memcheck` for (a), and
//! compare C with the CPU for (b)). Either way um-cublas's safety argument (rules 140-146,
//! interop.md "What the types cannot see") does not mention graphs at all, and no test covers
//! a GEMM on a capture stream.
//!
//! Proposed fix: bound `K: Eager` on `gemm`/`gemv` (as um-nccl's `CollectiveStream: Eager`
//! does), or support graphs explicitly: `cublasSetWorkspace_v2` with a buffer the `Graph` holds.
use um::cublas::{Blas, Gemm};
use um::{Context, Managed, StreamOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::new(0)?;
    let blas = Blas::new(&ctx)?; // never used before the capture: no cuCtxSynchronize at bind
    let (m, n, k) = (64usize, 64usize, 16384usize); // a long k: split-K with a workspace is likely
    let a = Managed::from_fn_mirrored(&ctx, m * k, |i| (i % 7) as f32)?;
    let b = Managed::from_fn_mirrored(&ctx, k * n, |i| (i % 5) as f32)?;
    let c = Managed::<[f32], _, _>::zeroed_slice_mirrored(&ctx, m * n)?;
    ctx.with_stream(StreamOptions::new().non_blocking(), |s| {
        let set = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
        let (graph, ()) = s.capture(set, |cap, (a, b, mut c)| {
            blas.gemm(cap, &Gemm::new(m, n, k), &a, &b, &mut c)?; // recorded, not run
            Ok(((a, b, c), ()))
        })?;
        drop(blas); // (a): cublasDestroy_v2 frees the workspace the recorded nodes use
        let y2 = Managed::<[f32]>::zeroed_slice(&ctx, 1 << 22)?; // may take the freed memory
        for _ in 0..100 {
            graph.launch(s)?; // replays a GEMM on freed workspace
        }
        let (_a, _b, c) = graph.sync()?;
        println!("c[0] = {} (expected {})", c[0], (0..k).map(|p| ((p * m) % 7 * (p % 5)) as f32).sum::<f32>());
        drop(y2);
        Ok(())
    })?;
    Ok(())
}
