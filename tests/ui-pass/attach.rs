// Twin of tests/ui/attach: the whole allocation is attached (length 0 in the driver call), and
// the states are those `um` provides.
use um::{Context, HostOwned, Managed, StreamOptions, StreamOwned};

fn whole<'s>(m: Managed<[u8], StreamOwned<'s>>) -> Managed<[u8], StreamOwned<'s>> {
    m
}

fn attach(ctx: &Context) -> um::Result<()> {
    let data: Managed<[u8], HostOwned> = Managed::from_slice(ctx, &[0u8; 4096])?;
    ctx.with_stream(StreamOptions::new(), |stream| whole(data.attach(stream)?).sync().map(drop))
}

fn main() {
    let _ = attach;
}
