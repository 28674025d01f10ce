// Rules 254 and 257: a copy recorded into a graph reads and writes only buffers the graph holds:
// a buffer of the eager stream that began the capture is of that stream (its kind and brand),
// and the graph would replay a read of memory it does not hold (freed or handed to the CPU
// meanwhile). Expected: E0308, `StreamOwned<'_, Created>` where the capture's is expected.
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    let outside = Managed::from_slice(&ctx, &[1.0f32; 4])?;
    let x = Managed::from_slice(&ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (outside, x) = (outside.attach(s)?, x.attach(s)?);
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            cap.copy(&outside, &mut x)?;
            Ok(((x,), ()))
        })?;
        graph.launch(s)?;
        let (x,) = graph.sync()?;
        drop((x, outside.sync()?));
        Ok(())
    })
}
