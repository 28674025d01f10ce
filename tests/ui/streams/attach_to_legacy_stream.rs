// Rule: attaching memory singly to the NULL (legacy default) stream is illegal.
// Seed 002: "It is illegal to attach singly to the NULL stream, because the NULL stream is a
// virtual global stream and not a specific stream. An error will be returned in this case."
// (Seen on the GPU machine: CUDA_ERROR_INVALID_VALUE.) Here it does not compile.
use um::{Context, Managed};

fn legacy(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_legacy_stream(|legacy| {
        let data = data.attach(legacy)?;
        data.sync().map(drop)
    })
}

fn main() {
    let _ = legacy;
}
