//! The CUDA C++ baselines loaded into this process: `bench.sh` builds each baseline a second
//! time as a shared library (`-DUM_BASELINE_SHARED`) and names it in an environment variable,
//! which the fresh processes of this benchmark inherit. A C++ batch then takes its turn
//! between the Rust batches of one process, so that both sides run at the host speed that
//! process drew: the same program in separate processes differs by more than the goals'
//! margins where the host paces the stream (`bench/notes.md`, section 8).

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

/// The environment variable naming `libum_cublas_baseline.so` (`bench/cublas_baseline.cpp`).
pub(crate) const CUBLAS_LIB_VAR: &str = "UM_CPP_CUBLAS_LIB";
/// The environment variable naming `libum_baseline.so` (`bench/baseline.cpp`).
pub(crate) const BASELINE_LIB_VAR: &str = "UM_CPP_BASELINE_LIB";
/// The environment variable naming `libum_cg_baseline.so` (`bench/cg_baseline.cpp`).
pub(crate) const CG_LIB_VAR: &str = "UM_CPP_CG_LIB";

type GemmOpen = unsafe extern "C" fn(c_int, c_int, c_int, c_int) -> *mut c_void;
type GemmBatch = unsafe extern "C" fn(*mut c_void, c_int, *mut f64, *mut f64) -> c_int;
type GemmParts = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut u64, *mut u64, *mut u64);
type GemmBatchOn = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    u64,
    u64,
    u64,
    c_int,
    *mut f64,
    *mut f64,
) -> c_int;
type AllocOpen = unsafe extern "C" fn(usize, c_int) -> *mut c_void;
type AllocBatch = unsafe extern "C" fn(*mut c_void, c_int, *mut f64) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void);
type Cg = unsafe extern "C" fn(c_int, c_int, c_int, *mut f64) -> c_int;
type Scratch = unsafe extern "C" fn(*const std::ffi::c_char, c_int, u64, *mut f64) -> c_int;

/// A loaded library, or why not; `None` where its variable is unset.
type Loaded = Result<Option<&'static libloading::Library>, String>;

/// The library named by `var`, loaded once and never unloaded: `None` where the variable is
/// unset (bench.sh could not build it), an error where it is set and does not load.
fn library(var: &str, cell: &'static OnceLock<Loaded>) -> Loaded {
    cell.get_or_init(|| {
        let Some(path) = std::env::var_os(var) else {
            return Ok(None);
        };
        // SAFETY: the library is one of bench/'s baselines built by bench.sh: its
        // initialisers are the C++ runtime's (and cuBLAS's). It is leaked, so its entry points
        // stay valid for the life of the process.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
            let shown = std::path::Path::new(&path).display().to_string();
            format!("{var}={shown}: {e}")
        })?;
        Ok(Some(&*Box::leak(Box::new(lib))))
    })
    .clone()
}

/// The entry point `name` of `lib`, of type `F`.
///
/// # Safety
/// `F` is the function pointer type of the C declaration of `name` in the baseline's source.
unsafe fn symbol<F: Copy>(lib: &'static libloading::Library, name: &[u8]) -> Result<F, String> {
    // SAFETY: the caller's promise.
    unsafe { lib.get::<F>(name) }
        .map(|f| *f)
        .map_err(|e| e.to_string())
}

/// The GEMM entry points of `bench/cublas_baseline.cpp`.
#[derive(Clone, Copy)]
struct GemmApi {
    open: GemmOpen,
    batch: GemmBatch,
    parts: GemmParts,
    batch_on: GemmBatchOn,
    close: Close,
}

fn gemm_api() -> Result<Option<GemmApi>, String> {
    static LIB: OnceLock<Loaded> = OnceLock::new();
    let Some(lib) = library(CUBLAS_LIB_VAR, &LIB)? else {
        return Ok(None);
    };
    // SAFETY: the types are the C declarations in bench/cublas_baseline.cpp.
    unsafe {
        Ok(Some(GemmApi {
            open: symbol(lib, b"um_cpp_gemm_open\0")?,
            batch: symbol(lib, b"um_cpp_gemm_batch\0")?,
            parts: symbol(lib, b"um_cpp_gemm_parts\0")?,
            batch_on: symbol(lib, b"um_cpp_gemm_batch_on\0")?,
            close: symbol(lib, b"um_cpp_gemm_close\0")?,
        }))
    }
}

/// The allocation entry points of `bench/baseline.cpp`.
#[derive(Clone, Copy)]
struct AllocApi {
    open: AllocOpen,
    batch: AllocBatch,
    close: Close,
}

fn alloc_api() -> Result<Option<AllocApi>, String> {
    static LIB: OnceLock<Loaded> = OnceLock::new();
    let Some(lib) = library(BASELINE_LIB_VAR, &LIB)? else {
        return Ok(None);
    };
    // SAFETY: the types are the C declarations in bench/baseline.cpp.
    unsafe {
        Ok(Some(AllocApi {
            open: symbol(lib, b"um_cpp_alloc_open\0")?,
            batch: symbol(lib, b"um_cpp_alloc_batch\0")?,
            close: symbol(lib, b"um_cpp_alloc_close\0")?,
        }))
    }
}

/// Whether a C++ allocation library is named for this process.
pub(crate) fn alloc_named() -> bool {
    std::env::var_os(BASELINE_LIB_VAR).is_some()
}

/// 12a's C++ allocate-and-free in this process: its own pool (threshold `UINT64_MAX`) and
/// stream on the current context; closed on drop.
pub(crate) struct CppAlloc {
    api: AllocApi,
    state: *mut c_void,
}

impl CppAlloc {
    /// For `bytes`-byte allocations, after one untimed batch of `batch`, on the context
    /// current on this thread. `None` where no library is named.
    pub(crate) fn open(bytes: usize, batch: usize) -> Result<Option<Self>, String> {
        let Some(api) = alloc_api()? else {
            return Ok(None);
        };
        let batch = c_int::try_from(batch).map_err(|_| format!("{batch} is not a C int"))?;
        // SAFETY: the library's contract: a context is current (the caller's); failures end
        // the process with a message.
        let state = unsafe { (api.open)(bytes, batch) };
        if state.is_null() {
            return Err("um_cpp_alloc_open returned null".into());
        }
        Ok(Some(CppAlloc { api, state }))
    }

    /// `batch` allocate + zero + free, timed by the C++ side until the last call returned: µs
    /// per allocation (its stream then drained, untimed).
    pub(crate) fn batch(&self, batch: usize) -> Result<f64, String> {
        let batch = c_int::try_from(batch).map_err(|_| format!("{batch} is not a C int"))?;
        let mut us = 0.0;
        // SAFETY: `state` is open (closed only by drop); the out-pointer is a live local.
        let rc = unsafe { (self.api.batch)(self.state, batch, &mut us) };
        if rc == 0 {
            Ok(us)
        } else {
            Err(format!("um_cpp_alloc_batch returned {rc}"))
        }
    }
}

impl Drop for CppAlloc {
    fn drop(&mut self) {
        // SAFETY: closed once, with um's context current (the caller's scope).
        unsafe { (self.api.close)(self.state) }
    }
}

/// Whether a C++ GEMM library is named for this process (and its children).
pub(crate) fn gemm_named() -> bool {
    std::env::var_os(CUBLAS_LIB_VAR).is_some()
}

/// One C++ GEMM measurement in this process: its own stream, cuBLAS handle and `cuMemAlloc`
/// buffers on the current context; closed on drop.
pub(crate) struct CppGemm {
    api: GemmApi,
    state: *mut c_void,
}

impl CppGemm {
    /// `c = a b` of `(m, n, k)`, `f64` or `f32`, on the context current on this thread (the
    /// caller made um's current), after two untimed calls. `None` where no library is named.
    pub(crate) fn open(
        f64s: bool,
        (m, n, k): (usize, usize, usize),
    ) -> Result<Option<Self>, String> {
        let Some(api) = gemm_api()? else {
            return Ok(None);
        };
        let dim = |v: usize| c_int::try_from(v).map_err(|_| format!("{v} is not a C int"));
        // SAFETY: the library's contract: a context is current (the caller's), the sizes are
        // positive C ints; failures end the process with a message.
        let state = unsafe { (api.open)(c_int::from(f64s), dim(m)?, dim(n)?, dim(k)?) };
        if state.is_null() {
            return Err("um_cpp_gemm_open returned null".into());
        }
        Ok(Some(CppGemm { api, state }))
    }

    /// `iters` calls, timed by the C++ side: (µs per call until its stream drained, µs per
    /// call until the last call returned).
    pub(crate) fn batch(&self, iters: usize) -> Result<(f64, f64), String> {
        let iters = c_int::try_from(iters).map_err(|_| format!("{iters} is not a C int"))?;
        let (mut per_call, mut enqueue) = (0.0, 0.0);
        // SAFETY: `state` is open (closed only by drop); the out-pointers are live locals.
        let rc = unsafe { (self.api.batch)(self.state, iters, &mut per_call, &mut enqueue) };
        if rc == 0 {
            Ok((per_call, enqueue))
        } else {
            Err(format!("um_cpp_gemm_batch returned {rc}"))
        }
    }
}

impl CppGemm {
    /// The C++ side's stream and device addresses of `a`, `b` and `c`.
    pub(crate) fn parts(&self) -> (*mut c_void, [u64; 3]) {
        let (mut s, mut a, mut b, mut c) = (std::ptr::null_mut(), 0, 0, 0);
        // SAFETY: `state` is open; the out-pointers are live locals.
        unsafe { (self.api.parts)(self.state, &mut s, &mut a, &mut b, &mut c) };
        (s, [a, b, c])
    }

    /// As [`CppGemm::batch`], with the C++ side's handle on `stream` and the buffers at `abc`.
    ///
    /// # Safety
    /// `stream` is a live, idle stream of the current context; `abc` are device buffers of the
    /// shape's `a`, `b` and `c` that nothing else uses during the batch.
    pub(crate) unsafe fn batch_on(
        &self,
        stream: *mut c_void,
        [a, b, c]: [u64; 3],
        iters: usize,
    ) -> Result<(f64, f64), String> {
        let iters = c_int::try_from(iters).map_err(|_| format!("{iters} is not a C int"))?;
        let (mut per_call, mut enqueue) = (0.0, 0.0);
        // SAFETY: the caller's promise; `state` is open; the out-pointers are live locals.
        let rc = unsafe {
            (self.api.batch_on)(
                self.state,
                stream,
                a,
                b,
                c,
                iters,
                &mut per_call,
                &mut enqueue,
            )
        };
        if rc == 0 {
            Ok((per_call, enqueue))
        } else {
            Err(format!("um_cpp_gemm_batch_on returned {rc}"))
        }
    }
}

impl Drop for CppGemm {
    fn drop(&mut self) {
        // SAFETY: closed once; its stream is drained at the end of every batch.
        unsafe { (self.api.close)(self.state) }
    }
}

/// Whether a C++ conjugate-gradient library is named for this process.
pub(crate) fn cg_named() -> bool {
    std::env::var_os(CG_LIB_VAR).is_some()
}

/// `bench/cg_baseline.cpp`'s solve in this process: `reps` loops of `iters` iterations on the
/// `n`×`n` grid (its own stream, handles and `cudaMalloc` memory on the device's primary
/// context, all freed before it returns); each loop's ms. `None` where no library is named.
pub(crate) fn cg(n: usize, iters: usize, reps: usize) -> Result<Option<Vec<f64>>, String> {
    static LIB: OnceLock<Loaded> = OnceLock::new();
    let Some(lib) = library(CG_LIB_VAR, &LIB)? else {
        return Ok(None);
    };
    // SAFETY: the type is the C declaration in bench/cg_baseline.cpp.
    let run: Cg = unsafe { symbol(lib, b"um_cpp_cg\0")? };
    let int = |v: usize| c_int::try_from(v).map_err(|_| format!("{v} is not a C int"));
    let mut ms = vec![0.0f64; reps];
    // SAFETY: `ms` holds `reps` doubles, which the function writes, one per loop; failures end
    // the process with a message.
    let rc = unsafe { run(int(n)?, int(iters)?, int(reps)?, ms.as_mut_ptr()) };
    if rc == 0 {
        Ok(Some(ms))
    } else {
        Err(format!("um_cpp_cg returned {rc}"))
    }
}

/// `bench/baseline.cpp`'s 12b loop in this process: `batches` batches of the two-stage pipeline
/// with `stage_ns` stages and scratch from a pool of its own, its PTX read from `ptx_dir`, on the
/// context current on this thread; µs per batch. `None` where no library is named.
pub(crate) fn scratch(
    ptx_dir: &std::path::Path,
    batches: usize,
    stage_ns: u64,
) -> Result<Option<f64>, String> {
    static LIB: OnceLock<Loaded> = OnceLock::new();
    let Some(lib) = library(BASELINE_LIB_VAR, &LIB)? else {
        return Ok(None);
    };
    // SAFETY: the type is the C declaration in bench/baseline.cpp.
    let run: Scratch = unsafe { symbol(lib, b"um_cpp_scratch\0")? };
    let dir = std::ffi::CString::new(ptx_dir.as_os_str().as_encoded_bytes())
        .map_err(|e| e.to_string())?;
    let batches = c_int::try_from(batches).map_err(|_| format!("{batches} is not a C int"))?;
    let mut us = 0.0;
    // SAFETY: `dir` is a NUL-terminated path that outlives the call; the out-pointer is a live
    // local; a context is current (the caller's); failures end the process with a message.
    let rc = unsafe { run(dir.as_ptr(), batches, stage_ns, &mut us) };
    if rc == 0 {
        Ok(Some(us))
    } else {
        Err(format!("um_cpp_scratch returned {rc}"))
    }
}
