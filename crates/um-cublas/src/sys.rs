//! The cuBLAS v2 entry points `um-cublas` calls, as function pointers of the loaded library,
//! each with its status as a raw `i32`.
//!
//! `cublasStatus_t` is a C enum; a Rust `enum` in its place would be undefined behaviour the
//! moment a newer cuBLAS returned a code it does not list. So, as `um-core` does for the driver
//! (`crates/um-core/src/driver/sys.rs`), every status is an `i32`, turned into
//! [`Error::Status`](crate::Error::Status) before it reaches a caller.
//!
//! The prototypes are `cublas_api.h`'s (CUDA 11 to 13 keep them under these `_v2` names). The
//! element pointers of `cublasSgemm_v2` (`float *`) and `cublasDgemm_v2` (`double *`) are
//! declared `*const c_void` / `*mut c_void`: a pointer's ABI does not depend on its pointee, and
//! one type for both lets one code path call either. C enums (`cublasOperation_t`,
//! `cublasPointerMode_t`, `libraryPropertyType`, `cudaDataType`, `cublasComputeType_t`,
//! `cublasGemmAlgo_t`) are `int` in the C ABI, hence `c_int`.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

/// `cublasHandle_t`.
pub type Handle = *mut c_void;
/// `cudaStream_t` (the driver's `CUstream`: the same handle).
pub type CudaStream = *mut c_void;

/// `CUBLAS_STATUS_SUCCESS`.
pub const STATUS_SUCCESS: i32 = 0;
/// `CUBLAS_OP_N`: the matrix as stored.
pub const OP_N: c_int = 0;
/// `CUBLAS_OP_T`: its transpose.
pub const OP_T: c_int = 1;
/// `CUBLAS_POINTER_MODE_HOST`: `alpha` and `beta` are read from host memory, at the call.
pub const POINTER_MODE_HOST: c_int = 0;
/// `CUBLAS_POINTER_MODE_DEVICE`: scalars and results are device memory, read and written by
/// the work on the stream.
pub const POINTER_MODE_DEVICE: c_int = 1;
/// `CUDA_R_32F` of `cudaDataType`: `float`.
pub const R_32F: c_int = 0;
/// `CUDA_R_16F` of `cudaDataType`: `__half` (IEEE binary16).
pub const R_16F: c_int = 2;
/// `CUDA_R_16BF` of `cudaDataType`: `__nv_bfloat16`.
pub const R_16BF: c_int = 14;
/// `CUBLAS_COMPUTE_32F` of `cublasComputeType_t`: products summed in `float`.
pub const COMPUTE_32F: c_int = 68;
/// `CUBLAS_GEMM_DEFAULT` of `cublasGemmAlgo_t`: cuBLAS's own choice.
pub const GEMM_DEFAULT: c_int = -1;
/// `MAJOR_VERSION`, `MINOR_VERSION`, `PATCH_LEVEL` of `libraryPropertyType`.
pub const PROPERTIES: [c_int; 3] = [0, 1, 2];

/// `cublasCreate_v2`.
pub type CreateFn = unsafe extern "C" fn(handle: *mut Handle) -> i32;
/// `cublasDestroy_v2`.
pub type DestroyFn = unsafe extern "C" fn(handle: Handle) -> i32;
/// `cublasSetStream_v2`.
pub type SetStreamFn = unsafe extern "C" fn(handle: Handle, stream: CudaStream) -> i32;
/// `cublasSetPointerMode_v2`.
pub type SetPointerModeFn = unsafe extern "C" fn(handle: Handle, mode: c_int) -> i32;
/// `cublasGetProperty`.
pub type GetPropertyFn = unsafe extern "C" fn(kind: c_int, value: *mut c_int) -> i32;
/// `cublasGetStatusName` and `cublasGetStatusString`: static text, never freed.
pub type StatusTextFn = unsafe extern "C" fn(status: i32) -> *const c_char;

/// `cublasSgemm_v2` and `cublasDgemm_v2`:
/// `C = alpha op(A) op(B) + beta C`, column-major, `op(A)` m×k, `op(B)` k×n, `C` m×n.
pub type GemmFn = unsafe extern "C" fn(
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    lda: c_int,
    b: *const c_void,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    ldc: c_int,
) -> i32;

/// `cublasGemmEx`: a GEMM whose matrices and computation each have a `cudaDataType` and a
/// `cublasComputeType_t` (both `int` in the C ABI), with cuBLAS's algorithm choice; `alpha` and
/// `beta` are of the compute type's scalar type.
pub type GemmExFn = unsafe extern "C" fn(
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    c_type: c_int,
    ldc: c_int,
    compute_type: c_int,
    algo: c_int,
) -> i32;

/// `cublasSgemv_v2` and `cublasDgemv_v2`: `y = alpha op(A) x + beta y`, `A` m×n column-major.
pub type GemvFn = unsafe extern "C" fn(
    handle: Handle,
    trans: c_int,
    m: c_int,
    n: c_int,
    alpha: *const c_void,
    a: *const c_void,
    lda: c_int,
    x: *const c_void,
    incx: c_int,
    beta: *const c_void,
    y: *mut c_void,
    incy: c_int,
) -> i32;

/// `cublasSdot_v2` and `cublasDdot_v2`: `result = sum x[i * incx] * y[i * incy]`, `i < n`.
pub type DotFn = unsafe extern "C" fn(
    handle: Handle,
    n: c_int,
    x: *const c_void,
    incx: c_int,
    y: *const c_void,
    incy: c_int,
    result: *mut c_void,
) -> i32;

/// `cublasSnrm2_v2`, `cublasDnrm2_v2`, `cublasSasum_v2`, `cublasDasum_v2`: one strided vector
/// reduced to one value of its type.
pub type ReduceFn = unsafe extern "C" fn(
    handle: Handle,
    n: c_int,
    x: *const c_void,
    incx: c_int,
    result: *mut c_void,
) -> i32;

/// `cublasIsamax_v2` and `cublasIdamax_v2`: the 1-based index of the first element of largest
/// magnitude (0 for `n = 0`).
pub type IamaxFn = unsafe extern "C" fn(
    handle: Handle,
    n: c_int,
    x: *const c_void,
    incx: c_int,
    result: *mut c_int,
) -> i32;

/// `cublasSaxpy_v2` and `cublasDaxpy_v2`: `y = alpha x + y`.
pub type AxpyFn = unsafe extern "C" fn(
    handle: Handle,
    n: c_int,
    alpha: *const c_void,
    x: *const c_void,
    incx: c_int,
    y: *mut c_void,
    incy: c_int,
) -> i32;

/// `cublasSscal_v2` and `cublasDscal_v2`: `x = alpha x`.
pub type ScalFn = unsafe extern "C" fn(
    handle: Handle,
    n: c_int,
    alpha: *const c_void,
    x: *mut c_void,
    incx: c_int,
) -> i32;

/// `cublasScopy_v2` and `cublasDcopy_v2`: `y = x`.
pub type CopyFn = unsafe extern "C" fn(
    handle: Handle,
    n: c_int,
    x: *const c_void,
    incx: c_int,
    y: *mut c_void,
    incy: c_int,
) -> i32;

/// `cublasSswap_v2` and `cublasDswap_v2`: `x, y = y, x`.
pub type SwapFn = unsafe extern "C" fn(
    handle: Handle,
    n: c_int,
    x: *mut c_void,
    incx: c_int,
    y: *mut c_void,
    incy: c_int,
) -> i32;

/// `cublasSgemmStridedBatched` and `cublasDgemmStridedBatched`: `batch` GEMMs, the `i`-th on
/// `A + i * stride_a`, `B + i * stride_b`, `C + i * stride_c` (strides `long long`).
pub type GemmStridedBatchedFn = unsafe extern "C" fn(
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    lda: c_int,
    stride_a: i64,
    b: *const c_void,
    ldb: c_int,
    stride_b: i64,
    beta: *const c_void,
    c: *mut c_void,
    ldc: c_int,
    stride_c: i64,
    batch: c_int,
) -> i32;

/// The entry points of one loaded cuBLAS. Calling any of them is a foreign call, and so
/// `unsafe`: `um-cublas` makes its own calls through [`Blas`](crate::Blas); a program may use
/// these for calls `um-cublas` does not wrap (the benchmark's raw reference does), under the
/// rules of [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md).
#[derive(Debug, Clone, Copy)]
pub struct Api {
    /// `cublasCreate_v2`.
    pub create: CreateFn,
    /// `cublasDestroy_v2`.
    pub destroy: DestroyFn,
    /// `cublasSetStream_v2`.
    pub set_stream: SetStreamFn,
    /// `cublasSetPointerMode_v2`.
    pub set_pointer_mode: SetPointerModeFn,
    /// `cublasGetProperty`.
    pub get_property: GetPropertyFn,
    /// `cublasSgemm_v2`.
    pub sgemm: GemmFn,
    /// `cublasDgemm_v2`.
    pub dgemm: GemmFn,
    /// `cublasGemmEx`.
    pub gemm_ex: GemmExFn,
    /// `cublasSgemv_v2`.
    pub sgemv: GemvFn,
    /// `cublasDgemv_v2`.
    pub dgemv: GemvFn,
    /// `cublasSgemmStridedBatched`.
    pub sgemm_strided_batched: GemmStridedBatchedFn,
    /// `cublasDgemmStridedBatched`.
    pub dgemm_strided_batched: GemmStridedBatchedFn,
    /// `cublasSdot_v2`.
    pub sdot: DotFn,
    /// `cublasDdot_v2`.
    pub ddot: DotFn,
    /// `cublasSnrm2_v2`.
    pub snrm2: ReduceFn,
    /// `cublasDnrm2_v2`.
    pub dnrm2: ReduceFn,
    /// `cublasSasum_v2`.
    pub sasum: ReduceFn,
    /// `cublasDasum_v2`.
    pub dasum: ReduceFn,
    /// `cublasIsamax_v2`.
    pub isamax: IamaxFn,
    /// `cublasIdamax_v2`.
    pub idamax: IamaxFn,
    /// `cublasSaxpy_v2`.
    pub saxpy: AxpyFn,
    /// `cublasDaxpy_v2`.
    pub daxpy: AxpyFn,
    /// `cublasSscal_v2`.
    pub sscal: ScalFn,
    /// `cublasDscal_v2`.
    pub dscal: ScalFn,
    /// `cublasScopy_v2`.
    pub scopy: CopyFn,
    /// `cublasDcopy_v2`.
    pub dcopy: CopyFn,
    /// `cublasSswap_v2`.
    pub sswap: SwapFn,
    /// `cublasDswap_v2`.
    pub dswap: SwapFn,
    /// `cublasGetStatusName`, where the library has it (cuBLAS 11.4.2 and later).
    pub status_name: Option<StatusTextFn>,
    /// `cublasGetStatusString`, where the library has it.
    pub status_string: Option<StatusTextFn>,
}
