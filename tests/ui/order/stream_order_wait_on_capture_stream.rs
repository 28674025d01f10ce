// Rule 194: A capture stream waiting for an order recorded outside the capture would fail it
// (`..._ISOLATION`). Expected: E0277, `Capture` is not `Eager`.
use um::{Context, Managed, StreamOptions, StreamOrder};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let order = StreamOrder::new(&ctx)?;
    let x = Managed::from_slice(&ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        order.record(s)?;
        let x = x.attach(s)?;
        let (_graph, ()) = s.capture((x,), |cap, b| {
            order.enqueue_wait(cap)?;
            Ok((b, ()))
        })?;
        Ok(())
    })
}
