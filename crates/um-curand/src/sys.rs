//! The cuRAND host-API entry points `um-curand` calls, as function pointers of the loaded
//! library, each with its status as a raw `i32`.
//!
//! `curandStatus_t` is a C enum; a Rust `enum` in its place would be undefined behaviour the
//! moment a newer cuRAND returned a code it does not list. So every status is an `i32`, turned
//! into [`Error::Status`](crate::Error::Status) before it reaches a caller. C enums
//! (`curandRngType_t`, `libraryPropertyType`) are `int` in the C ABI, hence `c_int`. The
//! prototypes are `curand.h`'s (cuRAND 10, CUDA 11 to 13).
#![allow(non_snake_case)]

use std::ffi::{c_int, c_ulonglong, c_void};

/// `curandGenerator_t`.
pub type Generator = *mut c_void;
/// `cudaStream_t` (the driver's `CUstream`: the same handle).
pub type CudaStream = *mut c_void;

/// `CURAND_STATUS_SUCCESS`.
pub const STATUS_SUCCESS: i32 = 0;
/// `CURAND_RNG_PSEUDO_XORWOW`.
pub const RNG_XORWOW: c_int = 101;
/// `CURAND_RNG_PSEUDO_MRG32K3A`.
pub const RNG_MRG32K3A: c_int = 121;
/// `CURAND_RNG_PSEUDO_PHILOX4_32_10`.
pub const RNG_PHILOX4_32_10: c_int = 161;
/// `MAJOR_VERSION`, `MINOR_VERSION`, `PATCH_LEVEL` of `libraryPropertyType`.
pub const PROPERTIES: [c_int; 3] = [0, 1, 2];

/// `curandCreateGenerator`: a generator whose numbers are made on the device.
pub type CreateFn = unsafe extern "C" fn(generator: *mut Generator, kind: c_int) -> i32;
/// `curandDestroyGenerator`.
pub type DestroyFn = unsafe extern "C" fn(generator: Generator) -> i32;
/// `curandSetStream`.
pub type SetStreamFn = unsafe extern "C" fn(generator: Generator, stream: CudaStream) -> i32;
/// `curandSetPseudoRandomGeneratorSeed`.
pub type SetSeedFn = unsafe extern "C" fn(generator: Generator, seed: c_ulonglong) -> i32;
/// `curandGenerateSeeds`: sets up the generator's state on its stream.
pub type GenerateSeedsFn = unsafe extern "C" fn(generator: Generator) -> i32;
/// `curandGenerate`: `n` 32-bit values.
pub type GenerateFn = unsafe extern "C" fn(generator: Generator, out: *mut u32, n: usize) -> i32;
/// `curandGenerateUniform` and `curandGenerateUniformDouble`: `n` values in (0, 1].
pub type UniformFn = unsafe extern "C" fn(generator: Generator, out: *mut c_void, n: usize) -> i32;
/// `curandGenerateNormal`: `n` (even) `float`s of mean `mean` and deviation `stddev`.
pub type NormalF32Fn = unsafe extern "C" fn(
    generator: Generator,
    out: *mut f32,
    n: usize,
    mean: f32,
    stddev: f32,
) -> i32;
/// `curandGenerateNormalDouble`: the same in `double`.
pub type NormalF64Fn = unsafe extern "C" fn(
    generator: Generator,
    out: *mut f64,
    n: usize,
    mean: f64,
    stddev: f64,
) -> i32;
/// `curandGetProperty`.
pub type GetPropertyFn = unsafe extern "C" fn(kind: c_int, value: *mut c_int) -> i32;

/// The entry points of one loaded cuRAND. Calling any of them is a foreign call, and so
/// `unsafe`: `um-curand` makes its own calls through [`Rng`](crate::Rng); a program may use
/// these for calls `um-curand` does not wrap, under the rules of
/// [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md).
#[derive(Debug, Clone, Copy)]
pub struct Api {
    /// `curandCreateGenerator`.
    pub create: CreateFn,
    /// `curandDestroyGenerator`.
    pub destroy: DestroyFn,
    /// `curandSetStream`.
    pub set_stream: SetStreamFn,
    /// `curandSetPseudoRandomGeneratorSeed`.
    pub set_seed: SetSeedFn,
    /// `curandGenerateSeeds`.
    pub generate_seeds: GenerateSeedsFn,
    /// `curandGenerate`.
    pub generate: GenerateFn,
    /// `curandGenerateUniform`.
    pub uniform_f32: UniformFn,
    /// `curandGenerateUniformDouble`.
    pub uniform_f64: UniformFn,
    /// `curandGenerateNormal`.
    pub normal_f32: NormalF32Fn,
    /// `curandGenerateNormalDouble`.
    pub normal_f64: NormalF64Fn,
    /// `curandGetProperty`.
    pub get_property: GetPropertyFn,
}
