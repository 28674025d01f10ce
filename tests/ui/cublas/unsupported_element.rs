// Rule: only element types cuBLAS has a routine for here (f32, f64) are operands;
// `Element` is sealed, so no other type can claim one.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemv};

fn gemv(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let a = Managed::from_slice(ctx, &[1i32; 4])?;
    let x = Managed::from_slice(ctx, &[1i32; 2])?;
    let y = Managed::from_slice(ctx, &[0i32; 2])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (a, x, mut y) = (a.attach(s)?, x.attach(s)?, y.attach(s)?);
        blas.gemv(s, &Gemv::new(2, 2), &a, &x, &mut y)?;
        s.sync_all((a, x, y)).map(drop)
    })
}

fn main() {
    let _ = gemv;
}
