// Rule: a cuBLAS handle is used by one thread at a time: it carries the stream it is
// bound to, so two threads sharing it could enqueue on each other's streams. `Blas` is `Send`
// but not `Sync`: it may move to a thread, not be shared by two.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

fn worker(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let c = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, mut c) = (a.attach(s)?, c.attach(s)?);
        blas.gemm(s, &Gemm::new(2, 2, 2), &a, &a, &mut c)?;
        s.sync_all((a, c)).map(drop)
    })
}

fn share(ctx: &Context) -> Result<(), Box<dyn std::error::Error>> {
    let blas = Blas::new(ctx)?;
    std::thread::scope(|scope| {
        scope.spawn(|| worker(ctx, &blas));
        scope.spawn(|| worker(ctx, &blas));
    });
    Ok(())
}

fn main() {
    let _ = share;
}
