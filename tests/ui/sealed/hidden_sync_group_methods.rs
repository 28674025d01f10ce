// Rule: only `um` calls the hidden
// methods of `SyncGroup`: `release_group` enqueued the release to the host
// (an attach to the host without concurrent managed access) and left the buffer stream-owned,
// for a safe launch on memory the device may no longer touch. Each hidden method takes a token
// that no crate but um can name or make, so none can be called from outside, hidden or not.
use um::{Context, Managed, StreamOptions, SyncGroup};

fn forge(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let group = (data.attach(stream)?,);
        let _released = group.release_group(stream)?;
        let _host = group.sync_group(stream);
        Ok(())
    })
}

fn main() {
    let _ = forge;
}
