// Rule: the buffer cuBLAS writes is borrowed `&mut`: one writer, so it is neither an
// input of the same call nor read by anything else meanwhile, and a mirror is marked written.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemv};

fn gemv(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[1.0f64; 4])?;
    let x = Managed::from_slice(ctx, &[1.0f64; 2])?;
    let y = Managed::from_slice(ctx, &[0.0f64; 2])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, x, y) = (a.attach(s)?, x.attach(s)?, y.attach(s)?);
        blas.gemv(s, &Gemv::new(2, 2), &a, &x, &y)?;
        s.sync_all((a, x, y)).map(drop)
    })
}

fn main() {
    let _ = gemv;
}
