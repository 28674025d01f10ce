// Rule: a cuBLAS routine um-cublas does not wrap reaches the handle only through `unsafe`: the
// raw handle, bound to the caller's stream, is its `# Safety` promise.
use um::{Context, StreamOptions};
use um_cublas::Blas;

fn raw(ctx: &Context, blas: &Blas) -> um::Result<()> {
    ctx.with_stream(StreamOptions::new(), |s| {
        let _handle = blas.raw_handle_on(s);
        Ok(())
    })
}

fn main() {
    let _ = raw;
}
