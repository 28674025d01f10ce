// Rule: no cuBLAS call is recorded into a graph. A captured GEMM would
// use the handle's workspace at every replay, and the graph does not hold it: the handle may be
// dropped, or serve another stream, while the graph lives. `gemm` and `gemv` take an `Eager`
// stream only, and a capture stream is not one.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

fn record(ctx: &Context, blas: &Blas) -> Result<(), Box<dyn std::error::Error>> {
    let a = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let c = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let set = (a.attach(s)?, c.attach(s)?);
        let (graph, ()) = s.capture(set, |cap, (a, mut c)| {
            blas.gemm(cap, &Gemm::new(2, 2, 2), &a, &a, &mut c)?;
            Ok(((a, c), ()))
        })?;
        graph.sync().map(drop)
    })?;
    Ok(())
}

fn main() {
    let _ = record;
}
