// Rule 103 (rule 10 for coherent memory): `attach` is refused for the legacy stream, as for
// unified and mirrored memory, although coherent memory would make no driver call: one rule
// for every storage, so that switching a buffer's storage never changes which calls compile.
// `attach_global` is the way to hand memory to legacy-stream kernels.
use um::{Context, Managed};

fn legacy(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_coherent(ctx, &[1u32, 2, 3])?;
    ctx.with_legacy_stream(|legacy| {
        let data = data.attach(legacy)?;
        data.sync().map(drop)
    })
}

fn main() {
    let _ = legacy;
}
