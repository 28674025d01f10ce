// Give back memory of stream `a` with stream `b`'s single wait.
use um::{Context, Managed, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        let d = data.attach(a)?;
        ctx.with_stream(StreamOptions::new(), |b| b.sync_all((d,)).map(drop))
    })
}
fn main() { let _ = f; }
