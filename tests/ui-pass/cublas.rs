// Twins of tests/ui/cublas: operands owned by the call's stream, `&` in and `&mut` out, f32 and
// f64, any storage, row-major too; one `Blas` per thread, each moved into its thread.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm, Gemv, Op};

fn gemm(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let b = Managed::from_slice_mirrored(ctx, &[1.0f32; 4])?;
    let c = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, b, mut c) = (a.attach(s)?, b.attach(s)?, c.attach(s)?);
        blas.gemm(s, &Gemm::new(2, 2, 2).transa(Op::T), &a, &b, &mut c)?;
        blas.gemm(s, &Gemm::row_major(2, 2, 2), &a, &a, &mut c)?;
        s.sync_all((a, b, c)).map(drop)
    })
}

fn gemv(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[1.0f64; 4])?;
    let x = Managed::from_slice(ctx, &[1.0f64; 2])?;
    let y = Managed::from_slice(ctx, &[0.0f64; 2])?;
    ctx.with_per_thread_stream(|s| {
        let (a, x, mut y) = (a.attach(s)?, x.attach(s)?, y.attach(s)?);
        blas.gemv(s, &Gemv::new(2, 2).beta(0.5), &a, &x, &mut y)?;
        s.sync_all((a, x, y)).map(drop)
    })
}

fn per_thread(ctx: &Context) -> Result<(), Box<dyn std::error::Error>> {
    let blas = Blas::new(ctx)?;
    let other = Blas::new(ctx)?;
    std::thread::scope(|scope| {
        scope.spawn(move || gemm(ctx, &blas));
        scope.spawn(move || gemv(ctx, &other));
    });
    Ok(())
}

fn main() {
    let _ = per_thread;
}
