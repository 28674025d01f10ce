// A node's scalars are the tuple its `_node` launcher fixed; `Graph::set`
// cannot write a value of another type or size there (a length or a pointer would be next).
use um_test_kernels::testing;
use um::{Context, Linear, Managed, StreamOptions};

fn retype(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice_mirrored(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (mut graph, node) = s.capture((x,), |cap, (mut x,)| {
            let node = testing::add_scalar_node(cap, Linear::new(1, 8)?, &mut x, 1.0)?;
            Ok(((x,), node))
        })?;
        graph.set(&node, (u64::MAX,))?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = retype;
}
