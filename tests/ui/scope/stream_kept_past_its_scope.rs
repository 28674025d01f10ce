// Rule: a stream lives for its scope's closure only, so it cannot be kept past it: the scope
// destroys it (`cuStreamDestroy`) when the closure returns, and a handle kept outside would name
// a destroyed stream (the cuStreamAttachMemAsync reference: its associations silently revert).
use um::{Context, StreamOptions};

fn keep(ctx: &Context) -> um::Result<()> {
    let kept = ctx.with_stream(StreamOptions::new(), |stream| Ok(stream))?;
    kept.wait_idle()
}

fn main() {
    let _ = keep;
}
