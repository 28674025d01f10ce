// Rule: no cuSPARSE product is recorded into a graph: a replay would use the handle's
// workspace, which the graph does not hold. A handle belongs to an attachable (eager) stream,
// and a graph's capture stream is not one.
use um::{Context, Managed, StreamOptions};
use um_cusparse::Sparse;

fn record(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[0.0f32; 4])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (_graph, ()) = s.capture((x,), |cap, (x,)| {
            let _sparse = Sparse::new(cap)?;
            Ok(((x,), ()))
        })?;
        Ok(())
    })
}

fn main() {
    let _ = record;
}
