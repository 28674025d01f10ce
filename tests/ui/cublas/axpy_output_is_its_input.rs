// Rule: what a cuBLAS call writes is none of what it reads: `axpy(x, x)` would read `x` while
// writing it, and the borrow checker refuses `&x` beside `&mut x`.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Level1};

fn axpy(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        blas.axpy(s, &Level1::new(4), 2.0, &x, &mut x)?;
        x.sync().map(drop)
    })
}

fn main() {
    let _ = axpy;
}
