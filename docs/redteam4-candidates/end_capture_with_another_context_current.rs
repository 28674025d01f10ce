//! Red team 4, suspect 4 (needs two GPUs; low). Safe code only; not built.
//!
//! `Scope::end` (graph/capture.rs) binds no context before `cuStreamEndCapture`: with one
//! capture stream there is no join (whose `event.order` would bind the scope's context), so the
//! end capture runs with whatever context the closure left current. A buffer of *another*
//! device dropped as the closure's last act leaves that device's context current:
//! `Managed::drop` -> `capturing()` -> `defer_free(owner, ..)` -> `owner.bind()`.
//!
//! If `cuStreamEndCapture` needs the stream's context to be current and fails otherwise, the
//! capture is never ended: `active` is already false, so `Scope::drop` does not retry; the
//! origin stream stays capturing and is destroyed while capturing; and the thread stays in
//! thread-local capture mode in the driver, although `um`'s `CAPTURES` says it is not (every
//! later wait on this thread fails: `sync` returns Err and the buffers leak; the drop of an
//! eager buffer then waits instead of deferring, and leaks). Probably not UB, but an
//! inconsistent thread state; the driver decides.
//!
//! Fix: `self.ctx.bind()` at the top of `Scope::end` (as `Scope::drop` does before it), and
//! ignore nothing from `stream_end_capture` without leaving `active` true for a retry.

use um::kernels::testing::add_scalar;
use um::{Context, Managed, StreamOptions};

fn main() -> um::Result<()> {
    let gpu0 = Context::new(0)?;
    let gpu1 = Context::new(1)?;
    let x = Managed::from_slice(&gpu0, &[0.0f32; 256])?;
    let y = Managed::from_slice(&gpu1, &[0.0f32; 256])?;
    gpu1.with_stream(StreamOptions::new(), |s1| {
        let y = y.attach(s1)?;
        gpu0.with_stream(StreamOptions::new(), |s0| {
            let x = x.attach(s0)?;
            let (graph, ()) = s0.capture((x,), move |cap, (mut x,)| {
                add_scalar(cap, &mut x, 1.0)?;
                drop(y); // device 1's context is current from here on
                Ok(((x,), ()))
            })?; // cuStreamEndCapture(origin of device 0) with device 1 current
            graph.launch(s0)?;
            graph.sync().map(drop)
        })
    })
}
