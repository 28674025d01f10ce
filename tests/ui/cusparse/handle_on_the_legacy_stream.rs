// Rule: a cuSPARSE handle belongs to a stream its workspace and operands can be attached to:
// not the legacy stream (no single attach there), whose kind is no `SparseStream`.
use um::Context;
use um_cusparse::Sparse;

fn legacy(ctx: &Context) -> um::Result<()> {
    ctx.with_legacy_stream(|s| {
        let _ = Sparse::new(s);
        Ok(())
    })
}

fn main() {
    let _ = legacy;
}
