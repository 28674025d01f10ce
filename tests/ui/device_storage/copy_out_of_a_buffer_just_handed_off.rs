// Rule 231: the copies of device memory exist in the host state alone, where every kernel that
// wrote the buffer has been waited for. A buffer just handed off is owned by the receiving
// stream, whose wait for the sender's work is only enqueued: a copy out of it now could read
// before the sender's kernel wrote. `sync` first; then `to_vec` waits for its own copy.
use um::{Context, Managed, StreamOptions};

fn read(ctx: &Context) -> um::Result<Vec<f32>> {
    let data = Managed::from_slice_device(ctx, &[1.0f32, 2.0, 3.0])?;
    ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new(), |b| {
            let data = data.attach(a)?.hand_off(b)?;
            let mut out = [0.0f32; 3];
            data.copy_to_host(&mut out)?;
            data.to_vec()
        })
    })
}

fn main() {
    let _ = read;
}
