// Rule: a device address is for no longer than the borrow of its buffer: it cannot
// be kept across the `sync` that gives the buffer back to the CPU.
use um::{Context, Managed, StreamOptions};

fn keep(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32, 2.0])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut d = data.attach(s)?;
        let address = d.as_device_ptr_mut();
        let host = d.sync()?;
        println!("{} {}", address.len(), host[0]);
        Ok(())
    })
}

fn main() {
    let _ = keep;
}
