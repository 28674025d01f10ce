//! CPU references of the kernels, for tests and examples that check results.

/// The literal of the kernel of NVIDIA's "GPU Pro Tip: CUDA 7 Streams Simplify Concurrency",
/// `sqrt(pow(3.14159, i))`: not π, and kept as written.
#[allow(clippy::approx_constant)]
pub const STREAMS_POST_BASE: f64 = 3.14159;

/// What `streams::kernel` writes at index `i`: `sqrt(pow(3.14159, i))` in double precision,
/// stored as `float` (infinite from `i` = 1238 on, as on the GPU).
pub fn streams_kernel_value(i: usize) -> f32 {
    STREAMS_POST_BASE.powf(i as f64).sqrt() as f32
}

/// Whether `x` holds what `streams::kernel` writes, to within one part in a million (the GPU's
/// `pow` and the CPU's may differ in the last bits of a double).
pub fn matches_streams_kernel(x: &[f32]) -> bool {
    first_streams_kernel_mismatch(x).is_none()
}

/// The first index where `x` differs from what `streams::kernel` writes, with both values.
pub fn first_streams_kernel_mismatch(x: &[f32]) -> Option<(usize, f32, f32)> {
    x.iter().enumerate().find_map(|(i, &v)| {
        let w = streams_kernel_value(i);
        let close = v == w || (v - w).abs() <= w.abs() * 1e-6;
        (!close).then_some((i, v, w))
    })
}
