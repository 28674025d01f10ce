// Rule: memory enters a capture only as its buffer set: `cuStreamAttachMemAsync` cannot be
// captured (the driver refuses it and invalidates the capture), and a capture stream is not
// `Attachable`.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn attach_in_capture(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let y = Managed::from_slice(ctx, &[1.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            let mut y = y.attach(cap)?;
            testing::add_scalar(cap, &mut x, 1.0)?;
            testing::add_scalar(cap, &mut y, 1.0)?;
            Ok(((x,), ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = attach_in_capture;
}
