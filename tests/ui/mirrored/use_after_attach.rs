// Rules 3 and 4 for mirrored memory: a host borrow cannot live across `attach`, and the host
// handle is gone after it (the copy to the device reads the pinned half in stream order).
use um::{Context, Managed, StreamOptions};

fn after(ctx: &Context) -> um::Result<()> {
    let mut data = Managed::from_slice_mirrored(ctx, &[1.0f32, 2.0, 3.0])?;
    let slice: &mut [f32] = &mut data;
    ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream)?;
        slice[0] = 2.0;
        attached.sync().map(drop)
    })?;
    println!("{}", data[0]);
    Ok(())
}

fn main() {
    let _ = after;
}
