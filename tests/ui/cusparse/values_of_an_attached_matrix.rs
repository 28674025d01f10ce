// Rule: the CPU touches a matrix only while it owns it: once attached, neither its values nor
// its structure can be read or rewritten on the host (`values_mut` is a host-owned method).
use um::{Context, StreamOptions};
use um_cusparse::Csr;

fn rewrite(ctx: &Context) -> um::Result<()> {
    let Ok(a) = Csr::new(ctx, 2, 2, &[0, 1, 2], &[0, 1], &[1.0f64, 2.0]) else {
        return Ok(());
    };
    ctx.with_stream(StreamOptions::new(), |s| {
        let Ok(mut a) = a.attach(s) else {
            return Ok(());
        };
        a.values_mut()[0] = 7.0;
        let _ = a.row_offsets();
        let _ = a.sync();
        Ok(())
    })
}

fn main() {
    let _ = rewrite;
}
