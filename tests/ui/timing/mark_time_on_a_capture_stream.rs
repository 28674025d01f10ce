// Rule 251: a time mark on a graph's capture stream would be an event record node of the graph,
// whose time between two replays means nothing. Expected: E0277, `Capture` is not `Eager`.
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let x = Managed::from_slice(&ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (_graph, ()) = s.capture((x,), |cap, b| {
            let _mark = cap.mark_time()?;
            Ok((b, ()))
        })?;
        Ok(())
    })
}
