// A stream-owned buffer cannot leave its stream's scope as a panic payload
// (caught with `catch_unwind` outside, after the stream was destroyed): `panic_any` needs
// `'static`, and the buffer carries the scope's brand `'s`.
use um::{Context, Managed, StreamOptions};

fn escape(ctx: &Context) -> um::Result<()> {
    let y = Managed::from_slice(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let y = y.attach(s)?;
        std::panic::panic_any(y)
    })
}

fn main() {
    let _ = escape;
}
