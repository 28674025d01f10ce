// Rule: a device result has the type cuBLAS writes: `iamax_into` writes an `int`, so its
// result buffer holds `i32`, never the vector's `f32` (cuBLAS would store an index's bits as
// a float).
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Level1};

fn iamax(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 4])?;
    let r = Managed::from_slice(ctx, &[0.0f32])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, mut r) = (x.attach(s)?, r.attach(s)?);
        let _ = blas.iamax_into(s, &Level1::new(4), &x, &mut r);
        s.sync_all((x, r)).map(drop)
    })
}

fn main() {
    let _ = iamax;
}
