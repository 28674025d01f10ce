// hand_off into the legacy stream (which refuses CU_MEM_ATTACH_SINGLE).
use um::{Context, Managed, StreamOptions};
fn f(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        let d = data.attach(a)?;
        ctx.with_legacy_stream(|l| d.hand_off(l)?.sync().map(drop))
    })
}
fn main() { let _ = f; }
