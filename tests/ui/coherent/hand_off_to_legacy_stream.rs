// Rule 103 (rule 62 for coherent memory): a coherent buffer cannot be handed to the legacy
// stream either, although its handoff would only be an event: one rule for every storage.
// Memory for legacy-stream kernels goes there from the host, with `attach_global`.
use um::{Context, Managed, StreamOptions};

fn to_legacy(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_coherent(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_legacy_stream(|legacy| {
            let data = data.attach(a)?;
            let data = data.hand_off(legacy)?;
            data.sync().map(drop)
        })
    })
}

fn main() {
    let _ = to_legacy;
}
