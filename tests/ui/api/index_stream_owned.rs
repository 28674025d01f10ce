// A common mistake: indexing a stream-owned buffer on the CPU. Rule 1/2:
// the stream's kernels may be using it. `Index` and `IndexMut` exist only under the bound
// `S: HostAccess` (host-owned only), so the compiler says to `sync` first instead of "cannot
// index into a value".
use um::{Context, Managed, StreamOptions};

fn index(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let mut data = data.attach(stream)?;
        let first: f32 = data[0];
        let rest: &[f32] = &data[1..];
        data[2] = first + rest[0];
        data.sync().map(drop)
    })
}

fn main() {
    let _ = index;
}
