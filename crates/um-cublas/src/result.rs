//! The checked layer: each cuBLAS entry point of [`Api`] as a function that returns a
//! [`Result`], its status turned into [`Error::Status`]. The only file that calls an entry point
//! (`library.rs` reads the version while loading); `blas.rs` builds on it. Each `unsafe fn`
//! says what its caller guarantees, and every one that takes a handle also needs that no other
//! thread uses the handle during the call (cuBLAS's "Thread Safety"); none checks `um`'s rules,
//! which `blas.rs` does.

use std::ffi::{CStr, c_int};

use crate::element::{Element, Kind};
use crate::error::{Error, Result};
use crate::half::HalfElement;
use crate::shape::{GemmCall, GemvCall, Level1Call, StridedBatchedCall};
use crate::sys::{self, Api, Handle};

/// `cublasCreate_v2`: a handle for the context current on this thread.
pub(crate) fn create(api: &Api) -> Result<Handle> {
    let mut handle: Handle = std::ptr::null_mut();
    // SAFETY: a valid out-pointer. The handle is made for whatever context is current (the
    // caller's concern, not memory safety).
    let status = unsafe { (api.create)(&mut handle) };
    Error::status(api, "cublasCreate_v2", status)?;
    Ok(handle)
}

/// `cublasSetPointerMode_v2` to host: `alpha` and `beta` are read from host memory.
///
/// # Safety
/// `handle` is live (made by [`create`], not destroyed).
pub(crate) unsafe fn set_pointer_mode_host(api: &Api, handle: Handle) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.set_pointer_mode)(handle, sys::POINTER_MODE_HOST) };
    Error::status(api, "cublasSetPointerMode_v2", status)
}

/// `cublasSetPointerMode_v2` to device: scalars and results are device memory, read and
/// written by the work on the stream.
///
/// # Safety
/// `handle` is live; every call made in this mode passes device pointers for its scalars and
/// result, and the caller restores host mode ([`set_pointer_mode_host`]) before any call that
/// passes host pointers.
pub(crate) unsafe fn set_pointer_mode_device(api: &Api, handle: Handle) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.set_pointer_mode)(handle, sys::POINTER_MODE_DEVICE) };
    Error::status(api, "cublasSetPointerMode_v2", status)
}

/// `cublasSetStream_v2`: binds `handle` to `stream` (null: the legacy default stream).
///
/// # Safety
/// `handle` is live, its context current, and `stream` null or a live stream of that context.
pub(crate) unsafe fn set_stream(api: &Api, handle: Handle, stream: sys::CudaStream) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.set_stream)(handle, stream) };
    Error::status(api, "cublasSetStream_v2", status)
}

/// `cublasDestroy_v2`, after unbinding the handle from its stream (which may be gone).
///
/// # Safety
/// `handle` is live and never used again; its context is current, and no work of the handle
/// can still run (its workspace is freed).
pub(crate) unsafe fn destroy(api: &Api, handle: Handle) -> Result<()> {
    // SAFETY: the caller's guarantee; null is the legacy stream, always valid.
    let unbound = unsafe { (api.set_stream)(handle, std::ptr::null_mut()) };
    // SAFETY: the caller's guarantee.
    let destroyed = unsafe { (api.destroy)(handle) };
    Error::status(api, "cublasSetStream_v2", unbound)?;
    Error::status(api, "cublasDestroy_v2", destroyed)
}

/// `cublasSgemm_v2` or `cublasDgemm_v2` (by `T`): `C = alpha op(A) op(B) + beta C`, with the
/// shapes and leading dimensions of `call` and the scalars `(alpha, beta)` (column-major;
/// `first` is cuBLAS's A).
///
/// # Safety
/// `handle` is live, its context current, bound to the stream the call is enqueued on, in host
/// pointer mode, and that stream is ordered after every earlier call of the handle on another
/// stream (the handle's workspace serves them all). `first`, `second` and `c` are device
/// addresses of `T`s that stay allocated, and that no other work touches, until the stream has
/// run the call; cuBLAS reads `first` and `second` within `ld * (cols - 1) + rows` elements of
/// `call`'s shapes and reads and writes `c` within its own, and `c` overlaps neither.
pub(crate) unsafe fn gemm<T: Element>(
    api: &Api,
    handle: Handle,
    call: &GemmCall,
    (alpha, beta): (T, T),
    first: *const T,
    second: *const T,
    c: *mut T,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.sgemm, "cublasSgemm_v2"),
        Kind::F64 => (api.dgemm, "cublasDgemm_v2"),
    };
    // SAFETY: the caller's guarantees; `f` is the routine for `T` (`T::KIND`, a sealed
    // element type), and `alpha` and `beta` are locals that live across the call (cuBLAS reads
    // host scalars before it returns).
    let status = unsafe {
        f(
            handle,
            call.transa,
            call.transb,
            call.m,
            call.n,
            call.k,
            (&raw const alpha).cast(),
            first.cast(),
            call.lda,
            second.cast(),
            call.ldb,
            (&raw const beta).cast(),
            c.cast(),
            call.ldc,
        )
    };
    Error::status(api, name, status)
}

/// `cublasGemmEx` with `first` and `second` of `H` (`CUDA_R_16F` or `CUDA_R_16BF`), `c` of
/// `f32`, products summed in `f32` (`CUBLAS_COMPUTE_32F`, whose scalars are `float`), cuBLAS's
/// default algorithm: `C = alpha op(A) op(B) + beta C` with the shapes of `call`.
///
/// # Safety
/// As [`gemm`], with `first` and `second` device addresses of `H`s and `c` of `f32`s: every
/// extent is counted in elements of its own type.
pub(crate) unsafe fn gemm_ex<H: HalfElement>(
    api: &Api,
    handle: Handle,
    call: &GemmCall,
    (alpha, beta): (f32, f32),
    first: *const H,
    second: *const H,
    c: *mut f32,
) -> Result<()> {
    // SAFETY: the caller's guarantees; each matrix's data type is its pointee's (`H::DATA_TYPE`
    // of a sealed half type, `R_32F` for `f32`), and the scalars are `f32` locals, the scalar
    // type of `COMPUTE_32F`, that live across the call (host pointer mode: read before it
    // returns).
    let status = unsafe {
        (api.gemm_ex)(
            handle,
            call.transa,
            call.transb,
            call.m,
            call.n,
            call.k,
            (&raw const alpha).cast(),
            first.cast(),
            H::DATA_TYPE,
            call.lda,
            second.cast(),
            H::DATA_TYPE,
            call.ldb,
            (&raw const beta).cast(),
            c.cast(),
            sys::R_32F,
            call.ldc,
            sys::COMPUTE_32F,
            sys::GEMM_DEFAULT,
        )
    };
    Error::status(api, "cublasGemmEx", status)
}

/// `cublasSgemv_v2` or `cublasDgemv_v2` (by `T`): `y = alpha op(A) x + beta y`, unit strides.
///
/// # Safety
/// As [`gemm`]: a live, current, bound handle in host pointer mode, its stream ordered after the
/// handle's earlier calls on other streams; `a`, `x` and `y` device addresses of `T`s that stay
/// allocated and untouched by other work until the call has run; `a` read within
/// `lda * (cols - 1) + rows` elements, `x` and `y` within their lengths at stride 1 for
/// `call`'s shape, and `y` overlapping neither.
pub(crate) unsafe fn gemv<T: Element>(
    api: &Api,
    handle: Handle,
    call: &GemvCall,
    (alpha, beta): (T, T),
    a: *const T,
    x: *const T,
    y: *mut T,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.sgemv, "cublasSgemv_v2"),
        Kind::F64 => (api.dgemv, "cublasDgemv_v2"),
    };
    // SAFETY: as in `gemm`.
    let status = unsafe {
        f(
            handle,
            call.trans,
            call.m,
            call.n,
            (&raw const alpha).cast(),
            a.cast(),
            call.lda,
            x.cast(),
            1,
            (&raw const beta).cast(),
            y.cast(),
            1,
        )
    };
    Error::status(api, name, status)
}

/// `cublasSgemmStridedBatched` or `cublasDgemmStridedBatched` (by `T`): `call.batch` GEMMs of
/// `call.gemm`'s shape, the `i`-th on matrices starting `i * stride` elements into `first`,
/// `second` and `c`.
///
/// # Safety
/// As [`gemm`], for every GEMM of the batch: each `first + i * strides[0]` (and so on) read or
/// written within its matrix's extent stays within its allocation (`i < batch`), and the C
/// matrices of the batch overlap neither each other nor `first` and `second`.
pub(crate) unsafe fn gemm_strided_batched<T: Element>(
    api: &Api,
    handle: Handle,
    call: &StridedBatchedCall,
    (alpha, beta): (T, T),
    first: *const T,
    second: *const T,
    c: *mut T,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.sgemm_strided_batched, "cublasSgemmStridedBatched"),
        Kind::F64 => (api.dgemm_strided_batched, "cublasDgemmStridedBatched"),
    };
    let g = &call.gemm;
    // SAFETY: the caller's guarantees; `f` is the routine for `T`; the scalars are locals that
    // live across the call (host pointer mode: read before it returns).
    let status = unsafe {
        f(
            handle,
            g.transa,
            g.transb,
            g.m,
            g.n,
            g.k,
            (&raw const alpha).cast(),
            first.cast(),
            g.lda,
            call.strides[0],
            second.cast(),
            g.ldb,
            call.strides[1],
            (&raw const beta).cast(),
            c.cast(),
            g.ldc,
            call.strides[2],
            call.batch,
        )
    };
    Error::status(api, name, status)
}

/// `cublasSdot_v2` or `cublasDdot_v2`: the dot product of `call.n` elements of `x` and `y` at
/// their increments, written to `result`.
///
/// # Safety
/// `handle` is live, current, bound to the stream the call is enqueued on, ordered after the
/// handle's earlier calls on other streams; `x` and `y` are device addresses of `T`s that hold
/// `(n - 1) * inc + 1` elements at their increments, stay allocated and are written by no other
/// work until the stream has run the call. In host pointer mode `result` is a host `T` the
/// call writes before it returns (it waits for the stream); in device pointer mode a device
/// `T` with the same guarantees as `x`, overlapping neither input.
pub(crate) unsafe fn dot<T: Element>(
    api: &Api,
    handle: Handle,
    call: &Level1Call,
    x: *const T,
    y: *const T,
    result: *mut T,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.sdot, "cublasSdot_v2"),
        Kind::F64 => (api.ddot, "cublasDdot_v2"),
    };
    // SAFETY: the caller's guarantees; `f` is the routine for `T`.
    let status = unsafe {
        f(
            handle,
            call.n,
            x.cast(),
            call.incx,
            y.cast(),
            call.incy,
            result.cast(),
        )
    };
    Error::status(api, name, status)
}

/// Which one-vector reduction: `cublas?nrm2_v2` (Euclidean norm) or `cublas?asum_v2` (sum of
/// magnitudes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduce {
    Nrm2,
    Asum,
}

/// `cublas{S,D}{nrm2,asum}_v2`: `call.n` elements of `x` at `call.incx`, reduced into `result`.
///
/// # Safety
/// As [`dot`], for `x` alone.
pub(crate) unsafe fn reduce<T: Element>(
    api: &Api,
    handle: Handle,
    which: Reduce,
    call: &Level1Call,
    x: *const T,
    result: *mut T,
) -> Result<()> {
    let (f, name) = match (which, T::KIND) {
        (Reduce::Nrm2, Kind::F32) => (api.snrm2, "cublasSnrm2_v2"),
        (Reduce::Nrm2, Kind::F64) => (api.dnrm2, "cublasDnrm2_v2"),
        (Reduce::Asum, Kind::F32) => (api.sasum, "cublasSasum_v2"),
        (Reduce::Asum, Kind::F64) => (api.dasum, "cublasDasum_v2"),
    };
    // SAFETY: the caller's guarantees; `f` is the routine for `T`.
    let status = unsafe { f(handle, call.n, x.cast(), call.incx, result.cast()) };
    Error::status(api, name, status)
}

/// `cublasIsamax_v2` or `cublasIdamax_v2`: the 1-based index of the first element of `x` of
/// largest magnitude (0 for `n = 0`), written to `result`.
///
/// # Safety
/// As [`dot`], for `x` alone, with `result` an `int` (host or device by the pointer mode).
pub(crate) unsafe fn iamax<T: Element>(
    api: &Api,
    handle: Handle,
    call: &Level1Call,
    x: *const T,
    result: *mut c_int,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.isamax, "cublasIsamax_v2"),
        Kind::F64 => (api.idamax, "cublasIdamax_v2"),
    };
    // SAFETY: the caller's guarantees; `f` is the routine for `T`.
    let status = unsafe { f(handle, call.n, x.cast(), call.incx, result) };
    Error::status(api, name, status)
}

/// `cublasSaxpy_v2` or `cublasDaxpy_v2`: `y = alpha x + y` over `call.n` elements.
///
/// # Safety
/// As [`dot`], in host pointer mode, with `y` written: `y` overlaps no element of `x`.
pub(crate) unsafe fn axpy<T: Element>(
    api: &Api,
    handle: Handle,
    call: &Level1Call,
    alpha: T,
    x: *const T,
    y: *mut T,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.saxpy, "cublasSaxpy_v2"),
        Kind::F64 => (api.daxpy, "cublasDaxpy_v2"),
    };
    // SAFETY: the caller's guarantees; `alpha` is a local read before the call returns.
    let status = unsafe {
        f(
            handle,
            call.n,
            (&raw const alpha).cast(),
            x.cast(),
            call.incx,
            y.cast(),
            call.incy,
        )
    };
    Error::status(api, name, status)
}

/// `cublasSscal_v2` or `cublasDscal_v2`: `x = alpha x` over `call.n` elements at `call.incx`.
///
/// # Safety
/// As [`dot`], in host pointer mode, for `x` alone, written.
pub(crate) unsafe fn scal<T: Element>(
    api: &Api,
    handle: Handle,
    call: &Level1Call,
    alpha: T,
    x: *mut T,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.sscal, "cublasSscal_v2"),
        Kind::F64 => (api.dscal, "cublasDscal_v2"),
    };
    // SAFETY: the caller's guarantees; `alpha` is a local read before the call returns.
    let status = unsafe {
        f(
            handle,
            call.n,
            (&raw const alpha).cast(),
            x.cast(),
            call.incx,
        )
    };
    Error::status(api, name, status)
}

/// `cublasScopy_v2` or `cublasDcopy_v2`: `y = x` over `call.n` elements.
///
/// # Safety
/// As [`dot`], with `y` written: `y` overlaps no element of `x`.
pub(crate) unsafe fn copy<T: Element>(
    api: &Api,
    handle: Handle,
    call: &Level1Call,
    x: *const T,
    y: *mut T,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.scopy, "cublasScopy_v2"),
        Kind::F64 => (api.dcopy, "cublasDcopy_v2"),
    };
    // SAFETY: the caller's guarantees; `f` is the routine for `T`.
    let status = unsafe { f(handle, call.n, x.cast(), call.incx, y.cast(), call.incy) };
    Error::status(api, name, status)
}

/// `cublasSswap_v2` or `cublasDswap_v2`: `x` and `y` exchanged over `call.n` elements.
///
/// # Safety
/// As [`dot`], with both written: they overlap nowhere.
pub(crate) unsafe fn swap<T: Element>(
    api: &Api,
    handle: Handle,
    call: &Level1Call,
    x: *mut T,
    y: *mut T,
) -> Result<()> {
    let (f, name) = match T::KIND {
        Kind::F32 => (api.sswap, "cublasSswap_v2"),
        Kind::F64 => (api.dswap, "cublasDswap_v2"),
    };
    // SAFETY: the caller's guarantees; `f` is the routine for `T`.
    let status = unsafe { f(handle, call.n, x.cast(), call.incx, y.cast(), call.incy) };
    Error::status(api, name, status)
}

/// `cublasGetProperty`: the library's major, minor or patch number (`kind` of
/// [`sys::PROPERTIES`]); the status where it fails. Needs no device, context or handle.
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

/// What `cublasGetStatusName` and `cublasGetStatusString` say of `code`, where the library has
/// them.
pub(crate) fn status_texts(api: &Api, code: i32) -> (Option<String>, Option<String>) {
    let text = |f: Option<sys::StatusTextFn>| {
        f.and_then(|f| {
            // SAFETY: cuBLAS's status-text functions take any status and return a static
            // NUL-terminated string (or null), never freed.
            let p = unsafe { f(code) };
            (!p.is_null()).then(|| {
                // SAFETY: non-null, NUL-terminated, static (above).
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            })
        })
    };
    (text(api.status_name), text(api.status_string))
}
