//! Red team 9 (docs/redteam9.md): the fourth version of the idle sections held; what it pinned
//! down is here. Sixteen nested sections on one thread: the sixteenth and deeper waits are
//! refused (`Ok(false)`, documented), and a `Blas` move there is `CaptureInProgress`, whose
//! text now names that case (finding 1). A `Kernel` dropped after the last handle of its
//! device: its module is no longer unloaded after the primary context was released, because
//! `Kernel` and `Module` drop their module reference before their context (finding 2, and red
//! team 5's finding 6).
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use std::sync::atomic::{AtomicBool, Ordering};

use um::kernels::testing;
use um::{Context, Managed, StreamOptions};
use um_cublas::{Blas, Gemm};

mod common;
use common::serial;

/// Runs `bottom` inside `n` nested idle sections of `ctx`; panics if one of them is refused.
fn nest(ctx: &Context, n: usize, bottom: &dyn Fn()) {
    if n == 0 {
        bottom();
        return;
    }
    let ran = ctx
        .with_idle_unless_capturing(|| nest(ctx, n - 1, bottom))
        .expect("the section's wait");
    assert!(ran.is_some(), "section {n} from the bottom was refused");
}

#[test]
#[ignore = "needs a CUDA device"]
fn at_sixteen_nested_sections_a_wait_is_refused_and_a_blas_move_says_so() {
    let _serial = serial(); // captures change the answer of an idle section
    let ctx = common::gpu();
    let blas = Blas::new(&ctx).expect("cuBLAS");
    let n = 8;
    let g = Gemm::new(n, n, n);
    // Bind the handle to a first stream outside any section: the next stream is a move.
    ctx.with_stream(StreamOptions::new(), |s| {
        let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n])?.attach(s)?;
        let mut c = Managed::from_slice(&ctx, &vec![0.0f32; n * n])?.attach(s)?;
        blas.gemm(s, &g, &a, &a, &mut c)
            .expect("gemm, first stream");
        s.sync_all((a, c)).map(drop)
    })
    .expect("first stream");

    // 15 deep: one more nests, and its wait happens.
    nest(&ctx, 15, &|| {
        assert_eq!(
            ctx.wait_idle_unless_capturing(),
            Ok(true),
            "15 deep: the 16th section waits"
        );
    });

    // 16 deep: no capture anywhere, yet the wait is refused...
    nest(&ctx, 16, &|| {
        assert_eq!(
            ctx.wait_idle_unless_capturing(),
            Ok(false),
            "16 deep: refused, as documented"
        );
        // ...and a Blas move still goes through: it is ordered on the device and waits for
        // nothing (before `StreamOrder`, it was refused with a text naming this case).
        let moved = ctx.with_stream(StreamOptions::new(), |s| {
            let a = Managed::from_slice(&ctx, &vec![1.0f32; n * n])?.attach(s)?;
            let mut c = Managed::from_slice(&ctx, &vec![0.0f32; n * n])?.attach(s)?;
            let r = blas.gemm(s, &g, &a, &a, &mut c);
            s.sync_all((a, c))?;
            Ok(r)
        });
        let moved = moved.expect("second stream");
        assert!(moved.is_ok(), "16 deep, no capture: {moved:?}");
    });
    // The handle is dropped here, outside any section: destroyed, not leaked.
    drop(blas);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_kernel_dropped_after_the_last_handle_of_its_device_leaves_other_handles_modules_alone() {
    let _serial = serial(); // captures change the answer of an idle section
    // Touch the device once, so that a failure below is not a missing GPU.
    drop(common::gpu());
    let stop = AtomicBool::new(false);
    let rounds = common::workload(200, 20);
    std::thread::scope(|t| {
        // A: the kernel is the last handle of the device each round.
        t.spawn(|| {
            for _ in 0..rounds {
                let ctx = Context::new(0).expect("device 0");
                let k = ctx.kernel(testing::PTX, "axpy").expect("kernel");
                drop(ctx);
                // Before the fix: the ctx field first (retire, Shared::drop, the primary context
                // released), then cuModuleUnload of the kernel's module. Now the module's
                // reference goes first, and the context's cache unloads it after a wait.
                drop(k);
            }
            stop.store(true, Ordering::Relaxed);
        });
        // B: a fresh handle each round, a module loaded through it, one launch, checked.
        t.spawn(|| {
            let mut round = 0u32;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let ctx = Context::new(0).expect("device 0");
                let x = Managed::from_slice(&ctx, &[0.0f32; 256]).expect("alloc");
                let x = ctx
                    .with_stream(StreamOptions::new(), |s| {
                        let mut x = x.attach(s)?;
                        testing::add_scalar(s, &mut x, 1.0)?;
                        let (x,) = s.sync_all((x,))?;
                        Ok(x)
                    })
                    .unwrap_or_else(|e| {
                        panic!("round {round}: a module of this handle broke: {e}")
                    });
                assert!(x.iter().all(|v| *v == 1.0), "round {round}: wrong result");
            }
        });
    });
}
