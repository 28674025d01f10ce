//! The checked layer: each cuRAND entry point of [`Api`] as a function that returns a
//! [`Result`], its status turned into [`Error::Status`]. The only file that calls an entry point
//! (`library.rs` reads the version while loading); `rng.rs` builds on it. Each `unsafe fn` says
//! what its caller guarantees; every one that takes a generator also needs that no other thread
//! uses it during the call (cuRAND's generators are not thread-safe). None checks `um`'s rules,
//! which `rng.rs` does.

use std::ffi::c_int;

use crate::element::{Element, Kind};
use crate::error::{Error, Result};
use crate::sys::{self, Api, Generator};

/// `curandCreateGenerator`: a device generator of `kind` for the context current on this
/// thread.
pub(crate) fn create(api: &Api, kind: c_int) -> Result<Generator> {
    let mut generator: Generator = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; `kind` is one of `curandRngType_t`'s values (a bad one is a
    // status, not undefined behaviour).
    let status = unsafe { (api.create)(&mut generator, kind) };
    Error::status("curandCreateGenerator", status)?;
    Ok(generator)
}

/// `curandSetStream`: binds `generator` to `stream` (null: the legacy default stream).
///
/// # Safety
/// `generator` is live, and `stream` null, `CU_STREAM_PER_THREAD` or a live stream of the
/// generator's context.
pub(crate) unsafe fn set_stream(
    api: &Api,
    generator: Generator,
    stream: sys::CudaStream,
) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.set_stream)(generator, stream) };
    Error::status("curandSetStream", status)
}

/// `curandSetPseudoRandomGeneratorSeed`.
///
/// # Safety
/// `generator` is live.
pub(crate) unsafe fn set_seed(api: &Api, generator: Generator, seed: u64) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.set_seed)(generator, seed) };
    Error::status("curandSetPseudoRandomGeneratorSeed", status)
}

/// `curandGenerateSeeds`: sets up the generator's state on its stream (enqueued there).
///
/// # Safety
/// `generator` is live, its context current, and bound to a live stream.
pub(crate) unsafe fn generate_seeds(api: &Api, generator: Generator) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.generate_seeds)(generator) };
    Error::status("curandGenerateSeeds", status)
}

/// `curandGenerate`: `n` random 32-bit values into `out`, enqueued on the generator's stream.
///
/// # Safety
/// `generator` is live, its context current, bound to a live stream; `out` is the device
/// address of at least `n` `u32`s that stay allocated, and that no other work touches, until
/// that stream has run the call.
pub(crate) unsafe fn generate(
    api: &Api,
    generator: Generator,
    out: *mut u32,
    n: usize,
) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.generate)(generator, out, n) };
    Error::status("curandGenerate", status)
}

/// `curandGenerateUniform` or `curandGenerateUniformDouble` (by `T`): `n` values in (0, 1].
///
/// # Safety
/// As [`generate`], with `out` the device address of at least `n` `T`s.
pub(crate) unsafe fn uniform<T: Element>(
    api: &Api,
    generator: Generator,
    out: *mut T,
    n: usize,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.uniform_f32, "curandGenerateUniform"),
        Kind::F64 => (api.uniform_f64, "curandGenerateUniformDouble"),
    };
    // SAFETY: the caller's guarantee; `f` is the routine for `T` (`T::KIND`, a sealed type).
    let status = unsafe { f(generator, out.cast(), n) };
    Error::status(name, status)
}

/// `curandGenerateNormal` or `curandGenerateNormalDouble` (by `T`): `n` values of mean `mean`
/// and deviation `stddev`.
///
/// # Safety
/// As [`uniform`]; `n` is even (cuRAND writes pairs).
pub(crate) unsafe fn normal<T: Element>(
    api: &Api,
    generator: Generator,
    out: *mut T,
    n: usize,
    mean: T,
    stddev: T,
) -> Result<()> {
    let (status, name) = match (T::KIND, mean.to_f64(), stddev.to_f64()) {
        // SAFETY: the caller's guarantee; `T` is `f32` (`T::KIND`), so `out` points at `f32`s
        // and the scalars are `f32` values converted back exactly.
        (Kind::F32, m, d) => (
            unsafe { (api.normal_f32)(generator, out.cast(), n, m as f32, d as f32) },
            "curandGenerateNormal",
        ),
        // SAFETY: as above, for `f64`.
        (Kind::F64, m, d) => (
            unsafe { (api.normal_f64)(generator, out.cast(), n, m, d) },
            "curandGenerateNormalDouble",
        ),
    };
    Error::status(name, status)
}

/// `curandDestroyGenerator`.
///
/// # Safety
/// `generator` is live and never used again; its context is current, and no work of the
/// generator can still run (its state is freed).
pub(crate) unsafe fn destroy(api: &Api, generator: Generator) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.destroy)(generator) };
    Error::status("curandDestroyGenerator", status)
}

/// `curandGetProperty`: the library's major, minor or patch number (`kind` of
/// [`sys::PROPERTIES`]); the status where it fails. Needs no device or generator.
pub(crate) fn property(api: &Api, kind: c_int) -> std::result::Result<c_int, i32> {
    let mut value: c_int = 0;
    // SAFETY: a valid property and out-pointer.
    let status = unsafe { (api.get_property)(kind, &mut value) };
    if status == sys::STATUS_SUCCESS {
        Ok(value)
    } else {
        Err(status)
    }
}
