// Rule: a level-1 result written on the device goes into a buffer of the call's stream: a
// one-element buffer attached to stream `first` cannot take the dot product computed on
// stream `second`.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Level1};

fn dot(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let r = Managed::from_slice(ctx, &[0.0f32])?;
    ctx.with_stream(StreamOptions::new(), |first| {
        let mut r = r.attach(first)?;
        ctx.with_stream(StreamOptions::new(), |second| {
            let x = x.attach(second)?;
            blas.dot_into(second, &Level1::new(4), &x, &x, &mut r)?;
            x.sync().map(drop)
        })?;
        r.sync().map(drop)
    })
}

fn main() {
    let _ = dot;
}
