// Rule: a matrix moves between the CPU and one stream as one unit, and a matrix attached to the
// per-thread default stream (which names another stream on every thread) stays on the thread
// that attached it: no part of it can reach another thread's stream.
use um::{Context, Mirror};
use um_cusparse::Csr;

fn send(ctx: &Context) -> um::Result<()> {
    let Ok(a) = Csr::new_mirrored(ctx, 2, 2, &[0, 1, 2], &[0, 1], &[1.0f64, 2.0]) else {
        return Ok(());
    };
    ctx.with_per_thread_stream(|s| {
        let Ok(a) = a.attach(s) else {
            return Ok(());
        };
        let a: Csr<f64, _, Mirror> = a;
        std::thread::scope(|t| {
            t.spawn(move || drop(a));
        });
        Ok(())
    })
}

fn main() {
    let _ = send;
}
