//! The first GPU test: context, managed allocation, one embedded kernel, result read on the host.

use crate::common;

use um::StreamOptions;

#[test]
#[ignore = "needs a CUDA device"]
fn context_alloc_embedded_kernel_host_check() {
    let _serial = crate::common::serial();
    let ctx = common::gpu();
    let info = ctx.info();
    println!(
        "device: {} (cc {}.{}, {} SMs, driver CUDA {}.{}), concurrentManagedAccess={}, pageableMemoryAccess={}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.multiprocessors,
        info.driver_version.0,
        info.driver_version.1,
        info.concurrent_managed_access,
        info.pageable_memory_access
    );
    let n = 1000;
    let data = um::Managed::from_fn(&ctx, n, |i| i as f32).expect("allocation");
    let data = ctx
        .with_stream(StreamOptions::new(), |stream| {
            let mut data = data.attach(stream)?;
            um_test_kernels::testing::add_scalar(stream, &mut data, 0.5)?;
            data.sync()
        })
        .expect("attach, launch and sync");
    for (i, v) in data.iter().enumerate() {
        assert_eq!(*v, i as f32 + 0.5, "element {i}");
    }
}
