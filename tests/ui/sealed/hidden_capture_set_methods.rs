// Rule: only `um` calls the hidden methods of `CaptureSet` and `Scalars`: `enter`
// would retype buffers to a capture stream without a capture, `to_host` would hand a graph's
// buffers to the CPU behind its back, and `Scalars::write` would put values into a node. Each takes a token
// that no crate but um can name or make.
use um::{CaptureSet, Context, Managed, StreamOptions};

fn forge(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let set = (data.attach(stream)?,);
        let _owners = set.owners();
        let _host = CaptureSet::to_host(set);
        Ok(())
    })
}

fn main() {
    let _ = forge;
}
