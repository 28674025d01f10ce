// Twins of tests/ui/host_access: the CPU reads and writes host-owned memory, attaches it, and
// reads it again once `sync` has handed it back.
use um::{Context, Managed, StreamOptions};

fn host_access(ctx: &Context) -> um::Result<()> {
    let mut data = Managed::from_slice(ctx, &[1.0f32, 2.0, 3.0])?;
    data[0] = 5.0;
    let view: &[f32] = &data;
    println!("{}", view[0]);
    let data = ctx.with_stream(StreamOptions::new(), |stream| {
        let attached = data.attach(stream)?;
        println!("{} elements on the stream", attached.len());
        attached.sync()
    })?;
    println!("{}", data[0]);
    Ok(())
}

fn main() {
    let _ = host_access;
}
