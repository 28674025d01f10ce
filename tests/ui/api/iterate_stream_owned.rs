// A common mistake: iterating a stream-owned buffer on the CPU. Rule 1/2:
// the stream's kernels may be using it. `iter` and `iter_mut` are `Managed`'s own methods under
// the bound `S: HostAccess` (host-owned only), so the compiler says to `sync` first instead of
// "no method named `iter`". Mirrored memory: the pinned half may be stale.
use um::{Context, Managed, StreamOptions};

fn iterate(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice_mirrored(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let mut data = data.attach(stream)?;
        let total: f32 = data.iter().sum();
        for x in data.iter() {
            println!("{x}");
        }
        for x in data.iter_mut() {
            *x += total;
        }
        data.sync().map(drop)
    })
}

fn main() {
    let _ = iterate;
}
