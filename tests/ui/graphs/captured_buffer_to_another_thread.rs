// A buffer of a capture cannot move to another thread (the capture is
// thread-local; a drop there would free or wait during the capture): `Capture: !Send`.
use um::{Context, Managed, StreamOptions};

fn elsewhere(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice_mirrored(ctx, &[1.0f32; 8])?;
    let y = Managed::from_slice_mirrored(ctx, &[1.0f32; 8])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let set = vec![x.attach(s)?, y.attach(s)?];
        let (graph, ()) = s.capture(set, |_cap, mut set| {
            let lost = set.pop();
            std::thread::scope(|t| {
                t.spawn(move || drop(lost));
            });
            Ok((set, ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = elsewhere;
}
