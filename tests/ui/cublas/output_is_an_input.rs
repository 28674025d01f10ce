// Rule: the output of a cuBLAS call cannot also be one of its inputs: `&mut c` and
// `&c` at once do not borrow-check, so cuBLAS never reads what the same call writes.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

fn gemm(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let c = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, mut c) = (a.attach(s)?, c.attach(s)?);
        blas.gemm(s, &Gemm::new(2, 2, 2), &a, &c, &mut c)?;
        s.sync_all((a, c)).map(drop)
    })
}

fn main() {
    let _ = gemm;
}
