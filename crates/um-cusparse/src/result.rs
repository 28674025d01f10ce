//! The checked layer: each cuSPARSE entry point of [`Api`] as a function that returns a
//! [`Result`], its status turned into [`Error::Status`]. The only file that calls an entry point
//! (`library.rs` reads the version while loading); `sparse.rs` builds on it. Each `unsafe fn`
//! says what its caller guarantees; every one that takes a handle also needs that no other
//! thread uses the handle during the call. None checks `um`'s rules, which `sparse.rs` does.

use std::ffi::{CStr, c_int, c_void};

use crate::error::{Error, Result};
use crate::sys::{self, Api, DnMat, DnVec, Handle, SpMat};

/// `cusparseCreate`: a handle for the context current on this thread.
pub(crate) fn create(api: &Api) -> Result<Handle> {
    let mut handle: Handle = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let status = unsafe { (api.create)(&mut handle) };
    Error::status(api, "cusparseCreate", status)?;
    Ok(handle)
}

/// `cusparseSetStream`.
///
/// # Safety
/// `handle` is live, its context current, and `stream` null or a live stream of that context.
pub(crate) unsafe fn set_stream(api: &Api, handle: Handle, stream: sys::CudaStream) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.set_stream)(handle, stream) };
    Error::status(api, "cusparseSetStream", status)
}

/// `cusparseDestroy`.
///
/// # Safety
/// `handle` is live and never used again; its context is current, and no work of the handle
/// can still run.
pub(crate) unsafe fn destroy(api: &Api, handle: Handle) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.destroy)(handle) };
    Error::status(api, "cusparseDestroy", status)
}

/// `cusparseCreateCsr` with 32-bit zero-based indices and values of `data_type`: a descriptor
/// (host-side only) of the arrays at the three device addresses.
///
/// # Safety
/// The addresses hold `rows + 1` offsets, `nnz` column indices and `nnz` values of
/// `data_type`, a CSR structure that keeps every index in range, and stay allocated while the
/// descriptor is used. cuSPARSE reads them only in the calls the descriptor is passed to.
#[allow(clippy::too_many_arguments)] // cuSPARSE's own argument list
pub(crate) unsafe fn create_csr(
    api: &Api,
    (rows, cols, nnz): (i64, i64, i64),
    row_offsets: *const i32,
    col_indices: *const i32,
    values: *const c_void,
    data_type: c_int,
) -> Result<SpMat> {
    let mut descr: SpMat = std::ptr::null_mut();
    // SAFETY: the caller's guarantee; the pointers are stored, not written through (the
    // descriptor is an input of every call it is passed to here).
    let status = unsafe {
        (api.create_csr)(
            &mut descr,
            rows,
            cols,
            nnz,
            row_offsets.cast_mut().cast(),
            col_indices.cast_mut().cast(),
            values.cast_mut(),
            sys::INDEX_32I,
            sys::INDEX_32I,
            sys::INDEX_BASE_ZERO,
            data_type,
        )
    };
    Error::status(api, "cusparseCreateCsr", status)?;
    Ok(descr)
}

/// `cusparseCreateDnVec`: a descriptor of `size` values of `data_type` at `values`.
///
/// # Safety
/// `values` holds `size` values of `data_type`, and stays allocated while the descriptor is
/// used; it is written only where the descriptor is passed as an output.
pub(crate) unsafe fn create_dn_vec(
    api: &Api,
    size: i64,
    values: *mut c_void,
    data_type: c_int,
) -> Result<DnVec> {
    let mut descr: DnVec = std::ptr::null_mut();
    // SAFETY: the caller's guarantee.
    let status = unsafe { (api.create_dn_vec)(&mut descr, size, values, data_type) };
    Error::status(api, "cusparseCreateDnVec", status)?;
    Ok(descr)
}

/// `cusparseCreateDnMat`: a column-major `rows`×`cols` matrix with leading dimension `ld`.
///
/// # Safety
/// `values` holds `ld * (cols - 1) + rows` values of `data_type`, and stays allocated while the
/// descriptor is used; it is written only where the descriptor is passed as an output.
pub(crate) unsafe fn create_dn_mat(
    api: &Api,
    (rows, cols, ld): (i64, i64, i64),
    values: *mut c_void,
    data_type: c_int,
) -> Result<DnMat> {
    let mut descr: DnMat = std::ptr::null_mut();
    // SAFETY: the caller's guarantee.
    let status = unsafe {
        (api.create_dn_mat)(
            &mut descr,
            rows,
            cols,
            ld,
            values,
            data_type,
            sys::ORDER_COL,
        )
    };
    Error::status(api, "cusparseCreateDnMat", status)?;
    Ok(descr)
}

/// Destroys a descriptor made by one of the three functions above (host memory only).
///
/// # Safety
/// `descr` was made by the function of `kind` and is never used again.
pub(crate) unsafe fn destroy_descr(api: &Api, kind: Descr, descr: *mut c_void) {
    // SAFETY: the caller's guarantee. Statuses are ignored: a descriptor's destroy frees host
    // memory and has nothing to report that a caller could act on.
    let _ = unsafe {
        match kind {
            Descr::SpMat => (api.destroy_sp_mat)(descr),
            Descr::DnVec => (api.destroy_dn_vec)(descr),
            Descr::DnMat => (api.destroy_dn_mat)(descr),
        }
    };
}

/// The three kinds of descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Descr {
    SpMat,
    DnVec,
    DnMat,
}

/// `cusparseSpMV_bufferSize`: the workspace `spmv` with these arguments needs, in bytes.
///
/// # Safety
/// As [`spmv`], without the workspace: nothing is enqueued.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn spmv_buffer_size(
    api: &Api,
    handle: Handle,
    op: c_int,
    (alpha, beta): (*const c_void, *const c_void),
    (a, x, y): (SpMat, DnVec, DnVec),
    compute_type: c_int,
) -> Result<usize> {
    let mut size = 0usize;
    // SAFETY: the caller's guarantee; a valid out-pointer.
    let status = unsafe {
        (api.spmv_buffer_size)(
            handle,
            op,
            alpha,
            a,
            x,
            beta,
            y,
            compute_type,
            sys::SPMV_ALG_DEFAULT,
            &mut size,
        )
    };
    Error::status(api, "cusparseSpMV_bufferSize", status)?;
    Ok(size)
}

/// `cusparseSpMV`: `y = alpha op(A) x + beta y`, enqueued on the handle's stream.
///
/// # Safety
/// `handle` is live, its context current, bound to the stream every operand is owned by; the
/// descriptors describe memory that stays allocated, and that no other work touches, until that
/// stream has run the call, with `x` and `y` of `op(A)`'s column and row counts and `y` apart
/// from `A` and `x`; `alpha` and `beta` point at host values of the compute type, live across
/// the call; `buffer` holds at least what [`spmv_buffer_size`] said, on the same stream.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn spmv(
    api: &Api,
    handle: Handle,
    op: c_int,
    (alpha, beta): (*const c_void, *const c_void),
    (a, x, y): (SpMat, DnVec, DnVec),
    compute_type: c_int,
    buffer: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe {
        (api.spmv)(
            handle,
            op,
            alpha,
            a,
            x,
            beta,
            y,
            compute_type,
            sys::SPMV_ALG_DEFAULT,
            buffer,
        )
    };
    Error::status(api, "cusparseSpMV", status)
}

/// `cusparseSpMM_bufferSize` (`A` not transposed, `B` as stored).
///
/// # Safety
/// As [`spmm`], without the workspace: nothing is enqueued.
pub(crate) unsafe fn spmm_buffer_size(
    api: &Api,
    handle: Handle,
    (alpha, beta): (*const c_void, *const c_void),
    (a, b, c): (SpMat, DnMat, DnMat),
    compute_type: c_int,
) -> Result<usize> {
    let mut size = 0usize;
    // SAFETY: the caller's guarantee; a valid out-pointer.
    let status = unsafe {
        (api.spmm_buffer_size)(
            handle,
            sys::OP_N,
            sys::OP_N,
            alpha,
            a,
            b,
            beta,
            c,
            compute_type,
            sys::SPMM_ALG_DEFAULT,
            &mut size,
        )
    };
    Error::status(api, "cusparseSpMM_bufferSize", status)?;
    Ok(size)
}

/// `cusparseSpMM`: `C = alpha A B + beta C`, enqueued on the handle's stream.
///
/// # Safety
/// As [`spmv`], for `B` (`A`'s columns × `C`'s columns) and `C` (`A`'s rows × its columns),
/// `C` apart from `A` and `B`.
pub(crate) unsafe fn spmm(
    api: &Api,
    handle: Handle,
    (alpha, beta): (*const c_void, *const c_void),
    (a, b, c): (SpMat, DnMat, DnMat),
    compute_type: c_int,
    buffer: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller's guarantee.
    let status = unsafe {
        (api.spmm)(
            handle,
            sys::OP_N,
            sys::OP_N,
            alpha,
            a,
            b,
            beta,
            c,
            compute_type,
            sys::SPMM_ALG_DEFAULT,
            buffer,
        )
    };
    Error::status(api, "cusparseSpMM", status)
}

/// `cusparseGetProperty`: the library's major, minor or patch number; the status where it
/// fails. Needs no device or handle.
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

/// What `cusparseGetErrorName` and `cusparseGetErrorString` say of `code`, where the library
/// has them.
pub(crate) fn status_texts(api: &Api, code: i32) -> (Option<String>, Option<String>) {
    let text = |f: Option<sys::StatusTextFn>| {
        f.and_then(|f| {
            // SAFETY: cuSPARSE's status-text functions take any status and return a static
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
