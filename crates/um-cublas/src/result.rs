//! The checked layer: each cuBLAS entry point of [`Api`] as a function that returns a
//! [`Result`], its status turned into [`Error::Status`]. The only file that calls an entry point
//! (`library.rs` reads the version while loading); `blas.rs` builds on it. Each `unsafe fn`
//! says what its caller guarantees, and every one that takes a handle also needs that no other
//! thread uses the handle during the call (cuBLAS's "Thread Safety"); none checks `um`'s rules,
//! which `blas.rs` does.

use std::ffi::{CStr, c_int};

use crate::element::{Element, Kind};
use crate::error::{Error, Result};
use crate::shape::{GemmCall, GemvCall};
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
