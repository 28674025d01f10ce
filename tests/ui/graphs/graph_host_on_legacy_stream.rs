// `Graph::host` re-attaches the buffers after the host step, which the
// legacy stream cannot take singly: `host` needs an `Attachable` stream.
use um::{Context, Managed};

fn host(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice_coherent(ctx, &[1.0f32; 8])?;
    ctx.with_legacy_stream(|s| {
        let x = x.attach_global(s)?;
        let (mut graph, ()) = s.capture((x,), |_cap, set| Ok((set, ())))?;
        graph.host(s, |(x,)| x[0] = 2.0)?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = host;
}
