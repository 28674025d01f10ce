//! Two devices: memory and kernels of one device's context are refused by another's streams.
//!
//! Needs two GPUs. The GPU run script runs this binary only where `nvidia-smi` lists two or
//! more, and says "skipped" elsewhere; run with `--include-ignored` on one GPU, it fails.
#![allow(clippy::expect_used)] // test helpers stop at the first surprise, like the tests

use um::kernels::testing;
use um::{Context, Error, LaunchConfig, Managed, StreamOptions};

fn two_contexts() -> (Context, Context) {
    let a = Context::new(0).expect("device 0");
    let b = Context::new(1).expect("this test needs two CUDA devices");
    (a, b)
}

#[test]
#[ignore = "needs two CUDA devices"]
fn memory_of_another_context_is_refused_at_attach() {
    let (a, b) = two_contexts();
    assert!(!a.same_as(&b), "two devices, two primary contexts");
    println!("devices: {} and {}", a.info().name, b.info().name);
    let on_a = Managed::from_slice(&a, &[1.0f32; 8]).expect("alloc on device 0");
    let err = b
        .with_stream(StreamOptions::new(), |s| on_a.attach(s).map(drop))
        .expect_err("memory of device 0 on a stream of device 1");
    assert_eq!(err, Error::ContextMismatch, "{err}");
}

#[test]
#[ignore = "needs two CUDA devices"]
fn a_kernel_of_another_context_is_refused_at_launch() {
    let (a, b) = two_contexts();
    let kernel_of_a = a
        .kernel(testing::PTX, "add_scalar")
        .expect("kernel on device 0");
    let on_b = Managed::from_slice(&b, &[1.0f32; 8]).expect("alloc on device 1");
    let on_b = b
        .with_stream(StreamOptions::new(), |s| {
            let mut d = on_b.attach(s)?;
            // SAFETY: add_scalar(float *data, float value, unsigned n) over 8 elements; the
            // launch is refused before the driver sees it.
            let err = unsafe {
                s.launch(
                    &kernel_of_a,
                    LaunchConfig::linear(1, 8),
                    (&mut d, 1.0f32, 8u32),
                )
            }
            .expect_err("kernel of device 0 on a stream of device 1");
            assert_eq!(err, Error::ContextMismatch, "{err}");
            // The right kernel, through the typed launcher, works on device 1.
            testing::add_scalar(s, &mut d, 1.0)?;
            d.sync()
        })
        .expect("device 1 work");
    assert!(on_b.iter().all(|v| *v == 2.0));
}

#[test]
#[ignore = "needs two CUDA devices"]
fn each_device_runs_its_own_streams_from_its_own_thread() {
    let (a, b) = two_contexts();
    std::thread::scope(|scope| {
        for (ctx, add) in [(&a, 1.0f32), (&b, 2.0f32)] {
            scope.spawn(move || {
                let data = Managed::from_fn(ctx, 1 << 16, |i| i as f32).expect("alloc");
                let data = ctx
                    .with_stream(StreamOptions::new(), |s| {
                        let mut d = data.attach(s)?;
                        testing::add_scalar(s, &mut d, add)?;
                        d.sync()
                    })
                    .expect("stream work");
                assert!(data.iter().enumerate().all(|(i, v)| *v == i as f32 + add));
            });
        }
    });
}
