// Rule: only `um` calls the hidden methods of `KernelArg` and `KernelArgs`: the
// value a launch passes (which marks a mirror written) and the pointers to the arguments.
// Like `SyncGroup`'s, each takes a token that no crate but um can name or make.
use um::{Context, KernelArg, KernelArgs, Managed, StreamOptions};

fn forge(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1u32, 2, 3])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let mut data = data.attach(stream)?;
        let _pointer = KernelArg::raw(&&mut data);
        let _owner = (&data,).foreign_buffer(0);
        data.sync().map(drop)
    })
}

fn main() {
    let _ = forge;
}
