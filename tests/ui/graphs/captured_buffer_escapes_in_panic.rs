// A buffer of a capture cannot leave the closure as a panic payload (to be
// caught after the scope's drop has ended the capture and freed what was buried): `panic_any`
// needs `Send + 'static`, and a captured buffer is neither (`Capture: !Send`, brand `'c`). Nor
// can an eager buffer (brand `'s`) escape its stream scope that way
// (`eager_buffer_escapes_in_panic`).
use um::{Context, Managed, StreamOptions};

fn escape(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (graph, ()) = s.capture((x.attach(s)?,), |_cap, (x,)| {
            std::panic::panic_any(x);
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = escape;
}
