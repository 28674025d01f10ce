// The capture count is per thread (`THREAD_CAPTURES`), and a module first loaded
// inside a capture is loaded with the *calling* thread's capture mode relaxed. A capture stream
// used from a scoped thread would load modules and launch from a thread that um does not count
// as capturing. Refused: `Stream<'c, Capture>` is neither `Send` nor `Sync` (`Capture` holds a
// `PhantomData<*const ()>`), so `&Stream<'c, Capture>` cannot cross (E0277).
use um_test_kernels::testing;
use um::{Context, Managed, StreamOptions};

fn attack(ctx: &Context) -> um::Result<()> {
    let x = Managed::from_slice(ctx, &[0.0f32; 256])?;
    ctx.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
            std::thread::scope(|t| {
                t.spawn(|| testing::add_scalar(cap, &mut x, 1.0)).join().ok();
            });
            Ok(((x,), ()))
        })?;
        graph.sync().map(drop)
    })
}

fn main() {
    let _ = attack;
}
