// A buffer of a capture set dropped on a thread that is not capturing would find no
// scope to bury it in (`reclaim::defer::bury` looks in the *thread's* `CAPTURES`) and no capture
// on that thread's count, so its drop would take the eager path beside a live capture.
// Refused: the captured buffer is not `Send` (E0277).
use um::{Context, Managed, StreamOptions};

fn attack(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[0.0f32; 256])?;
    let y = Managed::from_slice(ctx, &[0.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let (x, y) = (x.attach(s)?, y.attach(s)?);
        let (graph, ()) = s.capture((x, y), |_cap, (x, y)| {
            std::thread::scope(|t| {
                t.spawn(move || drop(y));
            });
            drop(x);
            // Give up the capture (any `Err` will do): the point is where `y` was dropped.
            Err(ctx.mem_info().unwrap_err())
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = attack;
}
