// Rule 250: the time between two marks is read only once the device has reached both: a
// `TimeSpan` has no method that returns a time, only `wait` (a host wait) and `try_elapsed` (a
// query that may say "not yet"). Expected: E0599, no `duration` on `TimeSpan`.
use um::{Context, StreamOptions};

fn main() -> um::Result<()> {
    let ctx = Context::new(0)?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let start = s.mark_time()?;
        let end = s.mark_time()?;
        let span = start.until(&end)?;
        println!("{:?}", span.duration());
        Ok(())
    })
}
