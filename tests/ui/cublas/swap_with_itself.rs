// Rule: a swap's two vectors are two buffers: both are `&mut`, so one buffer cannot be both.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Level1};

fn swap(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f64; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        blas.swap(s, &Level1::new(4), &mut x, &mut x)?;
        x.sync().map(drop)
    })
}

fn main() {
    let _ = swap;
}
