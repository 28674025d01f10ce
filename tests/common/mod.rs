//! Helpers shared by the GPU tests.
#![allow(dead_code, unreachable_pub)]

use um::kernels::ptx;
use um::{Context, LaunchConfig, Managed, Stream, StreamKind, StreamOwned};

/// The context of device 0. GPU tests are `#[ignore = "needs a CUDA device"]`; run without a
/// device (`--include-ignored` on a machine without one) they fail here, saying why: a missing
/// GPU never makes a GPU test pass.
pub fn gpu() -> Context {
    match Context::new(0) {
        Ok(ctx) => ctx,
        Err(e) => panic!("this test needs a CUDA device: {e}"),
    }
}

pub fn grid_for(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, 1024) as u32;
    LaunchConfig::linear(blocks, 256)
}

/// `data[i] += value` on `stream` (kernels-ptx/testing.cu).
pub fn add_scalar<'s, K: StreamKind>(
    stream: &Stream<'s, K>,
    data: &mut Managed<[f32], StreamOwned<'s, K>>,
    value: f32,
) -> um::Result<()> {
    let kernel = stream
        .context()
        .load_ptx(ptx::TESTING_PTX)?
        .kernel("add_scalar")?;
    let n = data.len();
    // SAFETY: add_scalar(float *data, float value, unsigned n) writes data[0..n) through a
    // grid-stride loop; `data` holds n floats and is passed as `&mut`.
    unsafe { stream.launch(&kernel, grid_for(n), (data, value, n as u32)) }
}

/// `y[i] = a * x[i] + y[i]` on `stream`.
pub fn axpy<'s, K: StreamKind>(
    stream: &Stream<'s, K>,
    x: &Managed<[f32], StreamOwned<'s, K>>,
    y: &mut Managed<[f32], StreamOwned<'s, K>>,
    a: f32,
) -> um::Result<()> {
    assert_eq!(x.len(), y.len());
    let kernel = stream
        .context()
        .load_ptx(ptx::TESTING_PTX)?
        .kernel("axpy")?;
    let n = y.len();
    // SAFETY: axpy(const float *x, float *y, float a, unsigned n) reads x[0..n) and writes
    // y[0..n); both hold n floats; x is `&`, y is `&mut`.
    unsafe { stream.launch(&kernel, grid_for(n), (x, y, a, n as u32)) }
}
