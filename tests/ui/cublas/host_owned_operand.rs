// Rule: cuBLAS takes only buffers owned by the stream it runs on: a host-owned buffer
// is the CPU's, and no library call may read it while the CPU can write it.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

fn gemm(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let b = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let c = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (b, mut c) = (b.attach(s)?, c.attach(s)?);
        blas.gemm(s, &Gemm::new(2, 2, 2), &a, &b, &mut c)?;
        s.sync_all((b, c)).map(drop)
    })
}

fn main() {
    let _ = gemm;
}
