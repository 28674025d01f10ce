// The capture stream cannot leave the closure in its result `R` (it carries
// the fresh brand `'c`); an escaped `&Stream<'c, Capture>` would let launches be recorded
// after the capture ended, or run on a destroyed stream.
use um::{Context, Managed, StreamOptions};

fn escape(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice_mirrored(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, cap) = s.capture((x,), |cap, set| Ok((set, cap)))?;
        let _ = cap.id();
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = escape;
}
