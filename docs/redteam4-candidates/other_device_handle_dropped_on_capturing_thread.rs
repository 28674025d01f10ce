//! Red team 4, finding 2 (doc mismatch; a leak and a spurious Err, not UB; needs two GPUs to
//! watch). Safe code only; not built.
//!
//! Rule 187: "... and nothing a capturing thread drops is waited for". Two drops on a capturing
//! thread still wait, because the device-wide guard (`Shared::quiet().captures`) is per device,
//! while the driver's refusal of waits is per thread:
//!
//! A. The last `Context` handle of device 1 dropped inside a capture closure of device 0:
//!    `Inner::drop` -> `Shared::retire` sees no capture on device 1 -> `unload` ->
//!    `cuCtxSynchronize` on the capturing thread: refused, which invalidates the device-0
//!    capture (the closure returns Ok, `capture` returns an Err), and the modules are
//!    `mem::forget`-leaked. (If it is the last handle, `Shared::drop` also calls
//!    `cuDevicePrimaryCtxRelease` on the capturing thread.)
//! B. Nested captures on two devices on one thread: the inner (device 1) scope's `CaptureGuard`
//!    drop unloads device 1's graves with `cuCtxSynchronize` while the outer (device 0) capture
//!    is still open on this thread: the same refusal, the outer capture fails, the graves leak.
//!
//! Nothing freed under the GPU, so not UB; but the capture fails for a reason the docs say
//! cannot happen, and module memory is leaked.
//!
//! Fix: in `Shared::retire` and `CaptureGuard::drop`, also keep the modules in the graves while
//! the *current thread* is capturing (`crate::reclaim::defer::capturing()`); unload them when the
//! thread's last capture scope closes (or at the next guard drop / `Shared::drop` of the device
//! made on a non-capturing thread).

use um::kernels::testing::add_scalar;
use um::{Context, Managed, StreamOptions};

fn a_handle_of_another_device() -> um::Result<()> {
    let gpu0 = Context::new(0)?;
    let gpu1 = Context::new(1)?;
    gpu1.load_ptx(um::kernels::testing::PTX)?; // something to unload
    let x = Managed::from_slice(&gpu0, &[0.0f32; 256])?;
    gpu0.with_stream(StreamOptions::new(), |s| {
        let x = x.attach(s)?;
        let captured = s.capture((x,), move |cap, (mut x,)| {
            add_scalar(cap, &mut x, 1.0)?;
            drop(gpu1); // the last handle of device 1: cuCtxSynchronize on this thread
            Ok(((x,), ()))
        });
        // Expected by rule 187: Ok. Suspected: Err (capture invalidated), modules leaked.
        println!("{:?}", captured.as_ref().map(|_| ()));
        captured.and_then(|(g, ())| g.sync()).map(drop)
    })
}

fn nested_captures_on_two_devices() -> um::Result<()> {
    let gpu0 = Context::new(0)?;
    let gpu1 = Context::new(1)?;
    let doomed = Context::new(1)?; // a second handle of device 1, with a module
    doomed.load_ptx(um::kernels::testing::PTX)?;
    let x = Managed::from_slice(&gpu0, &[0.0f32; 256])?;
    let y = Managed::from_slice(&gpu1, &[0.0f32; 256])?;
    gpu0.with_stream(StreamOptions::new(), |s0| {
        gpu1.with_stream(StreamOptions::new(), |s1| {
            let (x, y) = (x.attach(s0)?, y.attach(s1)?);
            let outer = s0.capture((x,), |cap0, (mut x,)| {
                add_scalar(cap0, &mut x, 1.0)?;
                let inner = s1.capture((y,), |cap1, (mut y,)| {
                    add_scalar(cap1, &mut y, 1.0)?;
                    drop(doomed); // device 1 is capturing: its modules go to the graves
                    Ok(((y,), ()))
                })?; // the inner guard's drop: graves unloaded with cuCtxSynchronize, here,
                     // while device 0's capture is still open on this thread
                drop(inner.0.into_buffers()?);
                Ok(((x,), ()))
            });
            println!("{:?}", outer.as_ref().map(|_| ())); // suspected: Err
            outer.and_then(|(g, ())| g.sync()).map(drop)
        })
    })
}

fn main() {
    let _ = a_handle_of_another_device();
    let _ = nested_captures_on_two_devices();
}
