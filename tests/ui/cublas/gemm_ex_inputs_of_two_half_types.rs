// Rule: `gemm_ex` passes one data type for A and B (`H::DATA_TYPE`): an F16 `a` with a Bf16 `b`,
// which cuBLAS would read as F16 bits, does not compile: both inputs are of one half type.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Bf16, Blas, F16, Gemm};

fn gemm_ex(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[F16::from_f32(1.0)])?;
    let b = Managed::from_slice(ctx, &[Bf16::from_f32(1.0)])?;
    let c = Managed::from_slice(ctx, &[0.0f32])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
        let _ = blas.gemm_ex(s, &Gemm::new(1, 1, 1), &a, &b, &mut c);
        s.sync_all((a, b, c)).map(drop)
    })
}

fn main() {
    let _ = gemm_ex;
}
