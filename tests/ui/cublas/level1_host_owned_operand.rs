// Rule: a level-1 call reads only memory owned by its stream: a buffer the CPU owns (never
// attached) is not an operand of `nrm2`.
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Level1};

fn nrm2(ctx: &Context, blas: &Blas) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[3.0f32, 4.0])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let _norm = blas.nrm2(s, &Level1::new(2), &x)?;
        Ok(())
    })
}

fn main() {
    let _ = nrm2;
}
