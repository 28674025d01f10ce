// Rule: one wait covers only the buffers of the stream waited on.
// Seed 002: CPU access is allowed "so long as all operations in hStream have completed",
// hStream being the stream the memory is associated with, not any other.
use um::{Context, Managed, StreamOptions};

fn mixed(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    let y = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let (x, y) = (x.attach(a)?, y.attach(b)?);
            let (x, y) = a.sync_all((x, y))?;
            println!("{} {}", x[0], y[0]);
            Ok(())
        })
    })
}

fn main() {
    let _ = mixed;
}
