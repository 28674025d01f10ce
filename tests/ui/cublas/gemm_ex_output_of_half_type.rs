// Rule: `gemm_ex` sums half-precision products in f32 and writes f32: its output is an `f32`
// buffer, so an F16 (or Bf16) output, which cuBLAS would be told is `CUDA_R_32F`, does not
// compile.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, F16, Gemm};

fn gemm_ex(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[F16::from_f32(1.0)])?;
    let b = Managed::from_slice(ctx, &[F16::from_f32(1.0)])?;
    let c = Managed::from_slice(ctx, &[F16::from_f32(0.0)])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
        let _ = blas.gemm_ex(s, &Gemm::new(1, 1, 1), &a, &b, &mut c);
        s.sync_all((a, b, c)).map(drop)
    })
}

fn main() {
    let _ = gemm_ex;
}
