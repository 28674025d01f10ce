// Twin of tests/ui/handoff: memory goes from stream A to stream B (owned, per-thread, and
// between the streams of a set) without a host wait, kernels run on the stream that owns it at
// each point, and memory of the legacy stream (`attach_global`) may leave it by a handoff.
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn handoff(ctx: &Context) -> um::Result<()> {
    let data = Managed::from_slice(ctx, &[1.0f32; 256])?;
    let data = ctx.with_stream(StreamOptions::new(), |a| {
        ctx.with_stream(StreamOptions::new().non_blocking(), |b| {
            let mut data = data.attach(a)?;
            testing::add_scalar(a, &mut data, 1.0)?;
            let mut data = data.hand_off(b)?;
            testing::add_scalar(b, &mut data, 1.0)?;
            let mut data = data.hand_off(a)?; // and back
            testing::add_scalar(a, &mut data, 1.0)?;
            data.sync()
        })
    })?;
    // Per-thread stream to a created stream and back, on one thread.
    let data = ctx.with_per_thread_stream(|pts| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let data = data.attach(pts)?.hand_off(s)?;
            data.hand_off(pts)?.sync()
        })
    })?;
    // Off the legacy stream.
    let data = ctx.with_legacy_stream(|legacy| {
        ctx.with_stream(StreamOptions::new(), |s| {
            let mut data = data.attach_global(legacy)?;
            testing::add_scalar(legacy, &mut data, 1.0)?;
            data.hand_off(s)?.sync()
        })
    })?;
    // Between the streams of a set (one brand): checked at run time.
    let data = ctx.with_stream_set(2, StreamOptions::new(), |s| {
        let mut data = data.attach(&s[0])?;
        testing::add_scalar(&s[0], &mut data, 1.0)?;
        let mut data = data.hand_off(&s[1])?;
        testing::add_scalar(&s[1], &mut data, 1.0)?;
        data.sync()
    })?;
    drop(data);
    Ok(())
}

fn main() {
    let _ = handoff;
}
