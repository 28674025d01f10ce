// Rule 10 for mirrored memory: `attach` is refused for the legacy stream, as for unified
// memory (`attach_global` is the way to hand memory to legacy-stream kernels).
use um::{Context, Managed};

fn legacy(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1u32, 2, 3])?;
    ctx.with_legacy_stream(|legacy| {
        let data = data.attach(legacy)?;
        data.sync().map(drop)
    })
}

fn main() {
    let _ = legacy;
}
