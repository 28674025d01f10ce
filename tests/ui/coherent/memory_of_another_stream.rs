// Rule 101 (rule 6 for coherent memory): a coherent buffer attached to stream `a` goes to
// kernels on `a` only. Globally attached memory is reachable from every stream in the driver,
// and `attach` made no driver call: the brand is the only thing that keeps `b`'s kernels from
// racing with `a`'s.
use um::{Context, Managed, StreamOptions};

fn other_stream(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_coherent(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let mut data = data.attach(a)?;
            um_test_kernels::testing::add_scalar(b, &mut data, 1.0)?;
            data.sync().map(drop)
        })
    })
}

fn main() {
    let _ = other_stream;
}
