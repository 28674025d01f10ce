// Rule 194: A `StreamOrder` recorded on a graph's capture stream would put an event record into the
// graph (and a later `wait` on an eager stream would make it join the capture). Expected: E0277,
// `Capture` is not `Eager`.
use um::{Context, Managed, StreamOptions, StreamOrder};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let order = StreamOrder::new(&ctx)?;
    let x = Managed::from_slice(&ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (_graph, ()) = s.capture((x,), |cap, b| {
            order.record(cap)?;
            Ok((b, ()))
        })?;
        Ok(())
    })
}
