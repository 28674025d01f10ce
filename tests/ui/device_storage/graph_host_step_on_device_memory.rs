// Rule 230: a graph's host step between replays shows each buffer as `&mut T`, which device
// memory cannot give: `Graph::host` needs every buffer of the set to have a host side. A graph
// holding device memory gives it back by `sync` (then `to_vec`, `copy_from_host`).
use um::{Context, Managed, StreamOptions};

fn host(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice_device(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (mut graph, ()) = s.capture((x,), |_cap, set| Ok((set, ())))?;
        graph.host(s, |(x,)| x[0] = 2.0)?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = host;
}
