//! NCCL's entry points, raw, from the library um loaded: the references that um's calls are
//! measured against (`um_bench`'s host times, `nccl_probe`'s loop). Shared by both benchmarks
//! (`nccl_probe` includes this file by path).

use std::ffi::{c_int, c_void};

/// `ncclAllReduce(send, recv, count, datatype, op, comm, stream)`, enums spelled `c_int`.
pub(crate) type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;

/// The entry points; `_lib` keeps the library loaded while they live. Each benchmark reads
/// some of them (the probe makes communicators, um_bench polls nonblocking ones).
#[allow(dead_code)]
pub(crate) struct RawNccl {
    pub(crate) init_all: unsafe extern "C" fn(*mut *mut c_void, c_int, *const c_int) -> c_int,
    pub(crate) group_start: unsafe extern "C" fn() -> c_int,
    pub(crate) group_end: unsafe extern "C" fn() -> c_int,
    pub(crate) all_reduce: AllReduce,
    pub(crate) async_error: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int,
    _lib: libloading::Library,
}

impl RawNccl {
    /// The library um loaded (`dlopen` returns the same handle), or um's error saying why not.
    pub(crate) fn load() -> Result<RawNccl, Box<dyn std::error::Error>> {
        let path = um::nccl::nccl()?.path().to_owned();
        // SAFETY: the library um already loaded; nothing runs. NCCL's entry points of these
        // names have these prototypes (nccl.h), with the enums spelled c_int; the library
        // outlives the pointers (kept in `_lib`).
        unsafe {
            let lib = libloading::Library::new(&path)?;
            Ok(RawNccl {
                init_all: *lib.get(b"ncclCommInitAll\0")?,
                group_start: *lib.get(b"ncclGroupStart\0")?,
                group_end: *lib.get(b"ncclGroupEnd\0")?,
                all_reduce: *lib.get(b"ncclAllReduce\0")?,
                async_error: *lib.get(b"ncclCommGetAsyncError\0")?,
                _lib: lib,
            })
        }
    }
}
