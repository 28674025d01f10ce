// Rule: a buffer's device address is given only while a stream owns it, for work on that
// stream: a host-owned buffer is the CPU's, and has none to give.
use um::{Context, Managed};

fn address(ctx: &Context) -> um::Result<u64> {
    let data = Managed::from_slice(ctx, &[1.0f32, 2.0])?;
    Ok(data.as_device_ptr().address())
}

fn main() {
    let _ = address;
}
