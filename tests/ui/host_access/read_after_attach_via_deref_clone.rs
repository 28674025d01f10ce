// Keep a `&[T]` (or a raw-pointer-free copy of the reference) across `attach`.
use um::{Context, Managed, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32; 8])?;
    let view: &[u32] = &data;
    ctx.with_stream(StreamOptions::new(), |s| {
        let d = data.attach(s)?;
        println!("{}", view[0]);
        d.sync().map(drop)
    })
}
fn main() { let _ = f; }
