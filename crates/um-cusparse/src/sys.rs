//! The cuSPARSE generic-API entry points `um-cusparse` calls, as function pointers of the
//! loaded library, each with its status as a raw `i32`.
//!
//! `cusparseStatus_t` is a C enum; a Rust `enum` in its place would be undefined behaviour the
//! moment a newer cuSPARSE returned a code it does not list, so every status is an `i32`. C
//! enums (`cusparseOperation_t`, `cusparseIndexType_t`, `cudaDataType`, ...) are `int` in the C
//! ABI, hence `c_int`. The prototypes are `cusparse.h`'s (cuSPARSE 12, CUDA 12 and 13); a
//! descriptor is an opaque pointer, `const` or not alike.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

/// `cusparseHandle_t`.
pub type Handle = *mut c_void;
/// `cusparseSpMatDescr_t` (and `cusparseConstSpMatDescr_t`).
pub type SpMat = *mut c_void;
/// `cusparseDnVecDescr_t` (and its `const` twin).
pub type DnVec = *mut c_void;
/// `cusparseDnMatDescr_t` (and its `const` twin).
pub type DnMat = *mut c_void;
/// `cudaStream_t` (the driver's `CUstream`: the same handle).
pub type CudaStream = *mut c_void;

/// `CUSPARSE_STATUS_SUCCESS`.
pub const STATUS_SUCCESS: i32 = 0;
/// `CUSPARSE_OPERATION_NON_TRANSPOSE`.
pub const OP_N: c_int = 0;
/// `CUSPARSE_OPERATION_TRANSPOSE`.
pub const OP_T: c_int = 1;
/// `CUSPARSE_INDEX_32I`.
pub const INDEX_32I: c_int = 2;
/// `CUSPARSE_INDEX_BASE_ZERO`.
pub const INDEX_BASE_ZERO: c_int = 0;
/// `CUDA_R_32F`.
pub const R_32F: c_int = 0;
/// `CUDA_R_64F`.
pub const R_64F: c_int = 1;
/// `CUSPARSE_SPMV_ALG_DEFAULT`.
pub const SPMV_ALG_DEFAULT: c_int = 0;
/// `CUSPARSE_SPMM_ALG_DEFAULT`.
pub const SPMM_ALG_DEFAULT: c_int = 0;
/// `CUSPARSE_ORDER_COL`: a column-major dense matrix.
pub const ORDER_COL: c_int = 1;
/// `MAJOR_VERSION`, `MINOR_VERSION`, `PATCH_LEVEL` of `libraryPropertyType`.
pub const PROPERTIES: [c_int; 3] = [0, 1, 2];

/// `cusparseCreate`.
pub type CreateFn = unsafe extern "C" fn(handle: *mut Handle) -> i32;
/// `cusparseDestroy`.
pub type DestroyFn = unsafe extern "C" fn(handle: Handle) -> i32;
/// `cusparseSetStream`.
pub type SetStreamFn = unsafe extern "C" fn(handle: Handle, stream: CudaStream) -> i32;
/// `cusparseGetProperty`.
pub type GetPropertyFn = unsafe extern "C" fn(kind: c_int, value: *mut c_int) -> i32;
/// `cusparseGetErrorName` and `cusparseGetErrorString`: static text.
pub type StatusTextFn = unsafe extern "C" fn(status: i32) -> *const c_char;
/// `cusparseCreateCsr`.
pub type CreateCsrFn = unsafe extern "C" fn(
    descr: *mut SpMat,
    rows: i64,
    cols: i64,
    nnz: i64,
    row_offsets: *mut c_void,
    col_ind: *mut c_void,
    values: *mut c_void,
    row_offsets_type: c_int,
    col_ind_type: c_int,
    base: c_int,
    value_type: c_int,
) -> i32;
/// `cusparseDestroySpMat`.
pub type DestroySpMatFn = unsafe extern "C" fn(descr: SpMat) -> i32;
/// `cusparseCreateDnVec`.
pub type CreateDnVecFn = unsafe extern "C" fn(
    descr: *mut DnVec,
    size: i64,
    values: *mut c_void,
    value_type: c_int,
) -> i32;
/// `cusparseDestroyDnVec`.
pub type DestroyDnVecFn = unsafe extern "C" fn(descr: DnVec) -> i32;
/// `cusparseCreateDnMat`.
pub type CreateDnMatFn = unsafe extern "C" fn(
    descr: *mut DnMat,
    rows: i64,
    cols: i64,
    ld: i64,
    values: *mut c_void,
    value_type: c_int,
    order: c_int,
) -> i32;
/// `cusparseDestroyDnMat`.
pub type DestroyDnMatFn = unsafe extern "C" fn(descr: DnMat) -> i32;
/// `cusparseSpMV_bufferSize`.
pub type SpMVBufferSizeFn = unsafe extern "C" fn(
    handle: Handle,
    op: c_int,
    alpha: *const c_void,
    a: SpMat,
    x: DnVec,
    beta: *const c_void,
    y: DnVec,
    compute_type: c_int,
    alg: c_int,
    size: *mut usize,
) -> i32;
/// `cusparseSpMV`.
pub type SpMVFn = unsafe extern "C" fn(
    handle: Handle,
    op: c_int,
    alpha: *const c_void,
    a: SpMat,
    x: DnVec,
    beta: *const c_void,
    y: DnVec,
    compute_type: c_int,
    alg: c_int,
    buffer: *mut c_void,
) -> i32;
/// `cusparseSpMM_bufferSize`.
pub type SpMMBufferSizeFn = unsafe extern "C" fn(
    handle: Handle,
    op_a: c_int,
    op_b: c_int,
    alpha: *const c_void,
    a: SpMat,
    b: DnMat,
    beta: *const c_void,
    c: DnMat,
    compute_type: c_int,
    alg: c_int,
    size: *mut usize,
) -> i32;
/// `cusparseSpMM`.
pub type SpMMFn = unsafe extern "C" fn(
    handle: Handle,
    op_a: c_int,
    op_b: c_int,
    alpha: *const c_void,
    a: SpMat,
    b: DnMat,
    beta: *const c_void,
    c: DnMat,
    compute_type: c_int,
    alg: c_int,
    buffer: *mut c_void,
) -> i32;

/// The entry points of one loaded cuSPARSE. Calling any of them is a foreign call, and so
/// `unsafe`: `um-cusparse` makes its own calls through [`Sparse`](crate::Sparse); a program may
/// use these for calls `um-cusparse` does not wrap, under the rules of
/// [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md).
#[derive(Debug, Clone, Copy)]
pub struct Api {
    /// `cusparseCreate`.
    pub create: CreateFn,
    /// `cusparseDestroy`.
    pub destroy: DestroyFn,
    /// `cusparseSetStream`.
    pub set_stream: SetStreamFn,
    /// `cusparseGetProperty`.
    pub get_property: GetPropertyFn,
    /// `cusparseCreateCsr`.
    pub create_csr: CreateCsrFn,
    /// `cusparseDestroySpMat`.
    pub destroy_sp_mat: DestroySpMatFn,
    /// `cusparseCreateDnVec`.
    pub create_dn_vec: CreateDnVecFn,
    /// `cusparseDestroyDnVec`.
    pub destroy_dn_vec: DestroyDnVecFn,
    /// `cusparseCreateDnMat`.
    pub create_dn_mat: CreateDnMatFn,
    /// `cusparseDestroyDnMat`.
    pub destroy_dn_mat: DestroyDnMatFn,
    /// `cusparseSpMV_bufferSize`.
    pub spmv_buffer_size: SpMVBufferSizeFn,
    /// `cusparseSpMV`.
    pub spmv: SpMVFn,
    /// `cusparseSpMM_bufferSize`.
    pub spmm_buffer_size: SpMMBufferSizeFn,
    /// `cusparseSpMM`.
    pub spmm: SpMMFn,
    /// `cusparseGetErrorName`, where the library has it.
    pub status_name: Option<StatusTextFn>,
    /// `cusparseGetErrorString`, where the library has it.
    pub status_string: Option<StatusTextFn>,
}
