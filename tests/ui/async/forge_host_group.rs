// Rule: only a completed wait gives memory back to the CPU.
// The hidden methods that sync futures use to retype a group to the host need a proof that
// the stream has run past it; no code outside `um` can make one (here: an empty list of
// releases is not that proof).
use um::{Context, Managed, StreamOptions, SyncGroup};

fn forge(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let group = (data.attach(stream)?,);
        let released = group.release_group(stream)?;
        let (host,) = group.host_group(released);
        println!("{}", host[0]);
        Ok(())
    })
}

fn main() {
    let _ = forge;
}
