// Rule: every operand of a cuBLAS call is owned by the stream the call is enqueued on:
// memory attached to stream `a` cannot be read by a GEMM on stream `b`.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

fn gemm(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let b = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let c = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |first| {
        let a = a.attach(first)?;
        ctx.with_stream(StreamOptions::new(), |second| {
            let (b, mut c) = (b.attach(second)?, c.attach(second)?);
            blas.gemm(second, &Gemm::new(2, 2, 2), &a, &b, &mut c)?;
            second.sync_all((b, c)).map(drop)
        })?;
        a.sync().map(drop)
    })
}

fn main() {
    let _ = gemm;
}
