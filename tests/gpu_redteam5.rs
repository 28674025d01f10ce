//! Red team 5 (docs/redteam5.md), finding 1, as GPU tests: a waker (safe code, run by um's
//! stream callback on the driver's thread) that drops the last clone of a `Context` handle with
//! a loaded module, while another thread holds the device's lock across its wait for the
//! context, and so for that very callback. Before the fix both tests hung (the watchdog aborts
//! the process after 60 s); now the callback defers the handle's modules (`Shared::deferred`)
//! instead of blocking, and `wait_idle_unless_capturing` called inside a callback waits for
//! nothing.
//!
//! Whether the race is hit depends on the GPU's speed (the 500 launches before the callback
//! take about 100 ms on an H100, long enough for the main thread to hold the lock first): on a
//! much faster GPU the test may pass without reaching it, never fail because of speed.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Wake, Waker};
use std::time::Duration;

use um::kernels::testing;
use um::{Context, Managed, StreamOptions};

struct DropsAHandle(Mutex<Option<Context>>);

impl Wake for DropsAHandle {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // Safe code, on the driver's callback thread: no CUDA call of its own.
        drop(self.0.lock().expect("waker state").take());
    }
}

/// A second handle of device 0 with one module loaded (a typed launcher ran through it).
fn handle_with_a_module() -> Context {
    let ctx = Context::new(0).expect("device 0");
    let y = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut y = y.attach(s)?;
        testing::add_scalar(s, &mut y, 1.0)?;
        s.sync_all((y,)).map(drop)
    })
    .expect("load a module through it");
    assert!(ctx.cache_stats().0 >= 1, "a module is loaded");
    ctx
}

fn watchdog() -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            eprintln!("deadlock: the main thread and the callback thread wait for each other");
            std::process::abort();
        }
    });
    tx
}

fn run(then: impl FnOnce(&Context)) {
    let done = watchdog();
    let ctx = Context::new(0).expect("device 0");
    let waker_state = Arc::new(DropsAHandle(Mutex::new(Some(handle_with_a_module()))));
    let waker = Waker::from(Arc::clone(&waker_state));
    let n = 1 << 26;
    let x = Managed::<[f32]>::zeroed_slice(&ctx, n).expect("alloc");
    ctx.with_stream(StreamOptions::new(), |s| {
        let mut x = x.attach(s)?;
        for _ in 0..500 {
            testing::add_scalar(s, &mut x, 1.0)?;
        }
        let mut fut = s.sync_all_async((x,));
        // Registers the waker; the callback is already enqueued behind the 500 launches.
        assert!(
            Pin::new(&mut fut)
                .poll(&mut TaskContext::from_waker(&waker))
                .is_pending()
        );
        // While the GPU still works: takes `quiet` and waits for the callback, whose waker
        // waits for `quiet`.
        then(&ctx);
        let (x,) = futures_lite_block_on(fut)?;
        assert_eq!(x[0], 500.0);
        Ok(())
    })
    .expect("the work");
    done.send(()).ok();
}

/// A minimal executor (thread-parking), so that the test needs no other crate.
fn futures_lite_block_on<F: Future + Unpin>(mut f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    loop {
        if let std::task::Poll::Ready(v) =
            Pin::new(&mut f).poll(&mut TaskContext::from_waker(&waker))
        {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_waker_dropping_a_handle_while_wait_idle_unless_capturing_waits_does_not_deadlock() {
    run(|ctx| {
        assert_eq!(ctx.wait_idle_unless_capturing(), Ok(true));
    });
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_waker_dropping_a_handle_while_another_handle_unloads_does_not_deadlock() {
    let other = handle_with_a_module();
    run(move |_| drop(other)); // Shared::retire -> unload: lock held across cuCtxSynchronize
}
