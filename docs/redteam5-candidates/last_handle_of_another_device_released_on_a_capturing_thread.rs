//! Red team 5, finding 3 (needs two GPUs; suspect: rule 187, spurious `Err` or a wait on a
//! capturing thread).
//!
//! The fix made `Shared::drop` leak the graves on a capturing thread
//! (crates/um-core/src/driver/context.rs:162-172), but it still calls
//! `driver::primary_ctx_release(self.device)` there, unconditionally (line 172). When um holds
//! the only retain (no runtime API, no other library), that release *destroys* device 1's
//! primary context, on the thread that is capturing on device 0. Context destruction waits for
//! the context's work; on a capturing thread (thread-local mode) a wait is refused and
//! invalidates the capture (design.md, rule 181), so the device-0 capture would return `Err`
//! although its closure returned `Ok` — rule 187's "the last handle of another device dropped
//! on a capturing thread waits for nothing" would be false. If the driver instead refuses the
//! release, the primary context stays retained forever with nobody to release it (a leak, not
//! documented in rule 187).
//!
//! Expected on a machine with two GPUs: the capture result is `Ok` and the replay gives 1.0
//! (what rule 187 promises). A failure here is the finding.
use um::kernels::testing;
use um::{Context, ContextOptions, Managed, StreamOptions};

#[test]
#[ignore = "needs two CUDA devices"]
fn the_last_handle_of_device_1_dropped_in_a_device_0_capture_leaves_it_valid() {
    let ctx0 = Context::with_options(0, ContextOptions::new()).expect("device 0");
    assert!(ctx0.info().concurrent_managed_access);
    let ctx1 = Context::with_options(1, ContextOptions::new()).expect("device 1");
    // A module in device 1's handle, and work that finished.
    let y = Managed::from_slice(&ctx1, &[0.0f32; 1 << 20]).expect("alloc");
    ctx1.with_stream(StreamOptions::new(), |s| {
        let mut y = y.attach(s)?;
        testing::add_scalar(s, &mut y, 1.0)?;
        s.sync_all((y,)).map(drop)
    })
    .expect("device 1 work");
    let mut last = Some(ctx1);
    let x = Managed::from_slice(&ctx0, &[0.0f32; 256]).expect("alloc");
    let x = ctx0
        .with_stream(StreamOptions::new(), |s| {
            let x = x.attach(s)?;
            let (graph, ()) = s.capture((x,), |cap, (mut x,)| {
                testing::add_scalar(cap, &mut x, 1.0)?;
                // Inner::drop -> retire (graves) -> Shared::drop on a capturing thread:
                // graves forgotten, then cuDevicePrimaryCtxRelease -> device 1's context destroyed.
                drop(last.take());
                Ok(((x,), ()))
            })?;
            graph.launch(s)?;
            let (x,) = graph.sync()?;
            Ok(x)
        })
        .expect("rule 187: nothing dropped on a capturing thread fails the capture");
    assert!(x.iter().all(|v| *v == 1.0));
}
