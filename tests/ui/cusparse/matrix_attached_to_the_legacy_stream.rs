// Rule: a matrix moves to a stream as one unit, all three parts attached singly to it: not to
// the legacy stream, which takes no single attach (its kind is not `Attachable`).
use um::Context;
use um_cusparse::Csr;

fn legacy(ctx: &Context) -> um::Result<()> {
    let Ok(a) = Csr::new(ctx, 2, 2, &[0, 1, 2], &[0, 1], &[1.0f32, 2.0]) else {
        return Ok(());
    };
    ctx.with_legacy_stream(|s| {
        let _ = a.attach(s);
        Ok(())
    })
}

fn main() {
    let _ = legacy;
}
