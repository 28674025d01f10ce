//! NCCL, loaded at run time: the entry points `um-nccl` calls, declared here with a raw `i32`
//! result (as `um-core` declares the driver's), and the loader.
//!
//! Building needs no NCCL. The library is opened once per process ([`nccl`]) and never closed:
//! NCCL starts threads of its own that run its code until the process exits. Where it comes
//! from: `$UM_NCCL_LIB` if set (a path, and nothing else is tried), otherwise `libnccl.so.2`, then
//! `libnccl.so`, by the dynamic loader's search. A missing library, a missing entry point or a
//! version older than [`MIN_VERSION`] is [`Error::NcclUnavailable`], saying what to install.
//!
//! The enums of `nccl.h` (`ncclResult_t`, `ncclDataType_t`, `ncclRedOp_t`) are C enums of `int`
//! size; they are spelled `i32` here, so that a value this crate does not know (a newer NCCL's)
//! is still a valid Rust value.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use um_core::{Error, Result};

/// `ncclComm_t`.
pub(crate) type RawComm = *mut c_void;
/// `cudaStream_t` (the driver's `CUstream`: the same handle).
pub(crate) type RawStream = *mut c_void;

/// `ncclSuccess`.
pub(crate) const SUCCESS: i32 = 0;
/// `ncclInProgress`: a nonblocking communicator is still working on the last call.
pub(crate) const IN_PROGRESS: i32 = 7;

/// The oldest NCCL this crate accepts: 2.17, whose `ncclConfig_t` (with `blocking`) is the one
/// declared here, and whose later versions read it by its `version` field.
pub const MIN_VERSION: (u32, u32, u32) = (2, 17, 0);

/// `NCCL_UNIQUE_ID_BYTES`.
pub(crate) const UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`, passed by value to `ncclCommInitRankConfig`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawUniqueId {
    pub(crate) internal: [c_char; UNIQUE_ID_BYTES],
}

/// `NCCL_CONFIG_UNDEF_INT`.
const CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// `NCCL_API_MAGIC`.
const CONFIG_MAGIC: c_uint = 0xcafe_beef;
/// `NCCL_VERSION(2, 17, 0)`: the layout of [`Config`]. NCCL 2.17 and later copy `size` bytes
/// and give the fields a 2.17 struct lacks their defaults.
const CONFIG_VERSION: c_uint = 21700;

/// `ncclConfig_t` as NCCL 2.17 declared it (`ncclConfig_v21700`).
#[repr(C)]
pub(crate) struct Config {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

impl Config {
    /// `NCCL_CONFIG_INITIALIZER`, with `blocking` set.
    pub(crate) fn new(blocking: bool) -> Config {
        Config {
            size: std::mem::size_of::<Config>(),
            magic: CONFIG_MAGIC,
            version: CONFIG_VERSION,
            blocking: c_int::from(blocking),
            cga_cluster_size: CONFIG_UNDEF_INT,
            min_ctas: CONFIG_UNDEF_INT,
            max_ctas: CONFIG_UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: CONFIG_UNDEF_INT,
        }
    }
}

/// The entry points, as plain function pointers (valid for the life of the process: the
/// library is never closed).
#[allow(clippy::type_complexity)]
pub(crate) struct Fns {
    pub(crate) get_version: unsafe extern "C" fn(*mut c_int) -> i32,
    pub(crate) get_unique_id: unsafe extern "C" fn(*mut RawUniqueId) -> i32,
    pub(crate) comm_init_rank_config:
        unsafe extern "C" fn(*mut RawComm, c_int, RawUniqueId, c_int, *mut Config) -> i32,
    pub(crate) comm_finalize: unsafe extern "C" fn(RawComm) -> i32,
    pub(crate) comm_destroy: unsafe extern "C" fn(RawComm) -> i32,
    pub(crate) comm_abort: unsafe extern "C" fn(RawComm) -> i32,
    pub(crate) comm_get_async_error: unsafe extern "C" fn(RawComm, *mut i32) -> i32,
    pub(crate) get_error_string: unsafe extern "C" fn(i32) -> *const c_char,
    pub(crate) get_last_error: unsafe extern "C" fn(RawComm) -> *const c_char,
    pub(crate) group_start: unsafe extern "C" fn() -> i32,
    pub(crate) group_end: unsafe extern "C" fn() -> i32,
    pub(crate) all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        RawStream,
    ) -> i32,
    pub(crate) broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        RawStream,
    ) -> i32,
    pub(crate) reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        c_int,
        RawComm,
        RawStream,
    ) -> i32,
    pub(crate) all_gather:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, RawComm, RawStream) -> i32,
    pub(crate) reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        RawComm,
        RawStream,
    ) -> i32,
    pub(crate) send:
        unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> i32,
    pub(crate) recv:
        unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> i32,
}

/// The loaded library: its entry points and version. One per process, from [`nccl`].
pub struct Nccl {
    pub(crate) fns: Fns,
    version: (u32, u32, u32),
    path: String,
    // Never closed (see the module's documentation): kept only to own the handle.
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl")
            .field("version", &self.version)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What to install, in every message about a missing or unusable library.
const INSTALL: &str = "install NCCL 2.17 or later: on Debian or Ubuntu with NVIDIA's CUDA \
     repository `apt install libnccl2`; anywhere with pip `pip install nvidia-nccl-cu13` (for \
     CUDA 13; `-cu12` for CUDA 12) and then set UM_NCCL_LIB to the libnccl.so.2 it brings \
     (`python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))'`/lib/libnccl.so.2)";

/// The library names tried, in order: `$UM_NCCL_LIB` alone if set, else the two sonames.
pub(crate) fn candidates() -> Vec<String> {
    match std::env::var_os("UM_NCCL_LIB") {
        Some(path) if !path.is_empty() => vec![path.to_string_lossy().into_owned()],
        _ => vec!["libnccl.so.2".to_owned(), "libnccl.so".to_owned()],
    }
}

/// The process's NCCL, loaded on first use (see the module's documentation). A failure is
/// remembered: every later call returns the same error.
pub fn nccl() -> Result<&'static Nccl> {
    // Loading runs the library's initialisers and asks its version: not inside um's stream
    // callback.
    um_core::refuse_inside_stream_callback("loading NCCL")?;
    static NCCL: OnceLock<Result<Nccl>> = OnceLock::new();
    match NCCL.get_or_init(|| Nccl::load_first(&candidates())) {
        Ok(n) => Ok(n),
        Err(e) => Err(e.clone()),
    }
}

/// Decodes `ncclGetVersion`'s integer: `NCCL_VERSION(X, Y, Z)` is `X*1000 + Y*100 + Z` up to
/// 2.8, `X*10000 + Y*100 + Z` after.
pub(crate) fn decode_version(code: i32) -> (u32, u32, u32) {
    let code = u32::try_from(code).unwrap_or(0);
    if code < 10_000 {
        (code / 1000, (code % 1000) / 100, code % 100)
    } else {
        (code / 10_000, (code % 10_000) / 100, code % 100)
    }
}

impl Nccl {
    /// Opens the first of `paths` that loads, and checks it (every entry point, the version).
    /// The library is never closed, also when this fails after opening it.
    ///
    /// Crate-private: opening a file runs its initialisers and trusts the types of its entry
    /// points, so only the paths of [`candidates`] (the user's `UM_NCCL_LIB`, or NCCL's soname)
    /// and the tests' own are ever opened.
    pub(crate) fn load_first(paths: &[String]) -> Result<Nccl> {
        let mut tried = Vec::new();
        for path in paths {
            // SAFETY: opening a shared library runs its initialisers. The file is the one the
            // user named in UM_NCCL_LIB, or NCCL's soname found by the dynamic loader's own
            // search: trusted as the dynamic loader trusts LD_LIBRARY_PATH. Nothing else is
            // called in it before its entry points are checked below.
            match unsafe { libloading::Library::new(path) } {
                Ok(lib) => return Nccl::check(lib, path),
                Err(e) => tried.push(format!("{path}: {e}")),
            }
        }
        Err(Error::NcclUnavailable {
            reason: format!(
                "the library could not be opened ({}); {INSTALL}",
                tried.join("; ")
            ),
        })
    }

    fn check(lib: libloading::Library, path: &str) -> Result<Nccl> {
        let lib = std::mem::ManuallyDrop::new(lib);
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: the symbol is NCCL's entry point of that name, whose C prototype in
                // `nccl.h` (2.17 to 2.28) is the function pointer type of the field it is
                // stored in (`Fns`), with the enums spelled `i32`; the library is never closed,
                // so the pointer stays valid.
                match unsafe { lib.get(concat!($name, "\0").as_bytes()) } {
                    Ok(symbol) => *symbol,
                    Err(e) => {
                        return Err(Error::NcclUnavailable {
                            reason: format!(
                                "{path} lacks the entry point {} ({e}): it is not NCCL, or an NCCL \
                                 older than {}.{}; {INSTALL}",
                                $name, MIN_VERSION.0, MIN_VERSION.1
                            ),
                        });
                    }
                }
            }};
        }
        let fns = Fns {
            get_version: sym!("ncclGetVersion"),
            get_unique_id: sym!("ncclGetUniqueId"),
            comm_init_rank_config: sym!("ncclCommInitRankConfig"),
            comm_finalize: sym!("ncclCommFinalize"),
            comm_destroy: sym!("ncclCommDestroy"),
            comm_abort: sym!("ncclCommAbort"),
            comm_get_async_error: sym!("ncclCommGetAsyncError"),
            get_error_string: sym!("ncclGetErrorString"),
            get_last_error: sym!("ncclGetLastError"),
            group_start: sym!("ncclGroupStart"),
            group_end: sym!("ncclGroupEnd"),
            all_reduce: sym!("ncclAllReduce"),
            broadcast: sym!("ncclBroadcast"),
            reduce: sym!("ncclReduce"),
            all_gather: sym!("ncclAllGather"),
            reduce_scatter: sym!("ncclReduceScatter"),
            send: sym!("ncclSend"),
            recv: sym!("ncclRecv"),
        };
        let mut code: c_int = 0;
        // SAFETY: a valid out-pointer; ncclGetVersion only writes the version.
        let rc = unsafe { (fns.get_version)(&mut code) };
        if rc != SUCCESS {
            return Err(Error::NcclUnavailable {
                reason: format!("{path}: ncclGetVersion returned {rc}; {INSTALL}"),
            });
        }
        let version = decode_version(code);
        if version < MIN_VERSION {
            return Err(Error::NcclUnavailable {
                reason: format!(
                    "{path} is NCCL {}.{}.{}, older than {}.{}.{}; {INSTALL}",
                    version.0, version.1, version.2, MIN_VERSION.0, MIN_VERSION.1, MIN_VERSION.2
                ),
            });
        }
        Ok(Nccl {
            fns,
            version,
            path: path.to_owned(),
            _lib: lib,
        })
    }

    /// NCCL's version, `(major, minor, patch)`.
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// The file the library was loaded from, as it was named.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `Error::Nccl` for `code` from `call`, with NCCL's text for it and, given a
    /// communicator, its last error message.
    pub(crate) fn error(&self, call: &'static str, code: i32, comm: Option<RawComm>) -> Error {
        let text = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: NCCL returns NUL-terminated strings that it keeps alive (static
                // tables, or the thread's last-error buffer, read at once).
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        // SAFETY: ncclGetErrorString accepts any value and returns a static string.
        let mut detail = text(unsafe { (self.fns.get_error_string)(code) });
        if let Some(comm) = comm {
            // SAFETY: `comm` is a live communicator (the callers pass theirs before any
            // abort); ncclGetLastError only reads.
            let last = text(unsafe { (self.fns.get_last_error)(comm) });
            if !last.is_empty() {
                detail = format!("{detail}; {last}");
            }
        }
        Error::Nccl {
            call,
            code,
            name: result_name(code).to_owned(),
            detail,
        }
    }
}

/// `ncclResult_t`'s names.
pub(crate) fn result_name(code: i32) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "an ncclResult_t this crate does not know",
    }
}

/// An `Nccl` whose entry points are `fns`, for the unit tests of the layers above: no file is
/// opened (the process's own symbols stand in for the library's handle).
#[cfg(test)]
impl Nccl {
    pub(crate) fn stand_in(fns: Fns) -> Nccl {
        Nccl {
            fns,
            version: MIN_VERSION,
            path: "stand-in".to_owned(),
            _lib: std::mem::ManuallyDrop::new(libloading::os::unix::Library::this().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_decode_both_ways_nccl_encodes_them() {
        assert_eq!(decode_version(2803), (2, 8, 3));
        assert_eq!(decode_version(22803), (2, 28, 3));
        assert_eq!(decode_version(23203), (2, 32, 3));
        assert!(decode_version(21700) >= MIN_VERSION);
        assert!(decode_version(21605) < MIN_VERSION);
    }

    #[test]
    fn the_config_has_nccl_2_17_s_layout() {
        // size_t, 2 unsigned, 4 int, a pointer, an int (+ padding): 48 bytes on 64-bit Linux.
        assert_eq!(std::mem::size_of::<Config>(), 48);
        assert_eq!(std::mem::offset_of!(Config, blocking), 16);
        assert_eq!(std::mem::offset_of!(Config, net_name), 32);
        assert_eq!(std::mem::size_of::<RawUniqueId>(), 128);
    }

    #[test]
    fn a_missing_library_says_what_to_install() {
        let err =
            Nccl::load_first(&["/nonexistent/libnccl.so.2".to_owned()]).expect_err("no such file");
        let text = err.to_string();
        assert!(matches!(err, Error::NcclUnavailable { .. }), "{text}");
        assert!(text.contains("/nonexistent/libnccl.so.2"), "{text}");
        assert!(text.contains("apt install libnccl2"), "{text}");
        assert!(text.contains("nvidia-nccl-cu13"), "{text}");
        assert!(text.contains("UM_NCCL_LIB"), "{text}");
    }

    #[test]
    fn a_library_that_is_not_nccl_is_refused_by_its_missing_entry_point() {
        // The C library is on every Linux machine, and has no ncclGetVersion.
        let err = Nccl::load_first(&["libc.so.6".to_owned()]).expect_err("libc is not NCCL");
        let text = err.to_string();
        assert!(text.contains("ncclGetVersion"), "{text}");
        assert!(text.contains("it is not NCCL"), "{text}");
    }

    #[test]
    fn every_name_is_tried_in_order_and_named_in_the_error() {
        let err = Nccl::load_first(&[
            "/nonexistent/a.so".to_owned(),
            "/nonexistent/b.so".to_owned(),
        ])
        .expect_err("neither exists");
        let text = err.to_string();
        let (a, b) = (text.find("a.so"), text.find("b.so"));
        assert!(a.is_some() && b.is_some() && a < b, "{text}");
    }

    #[test]
    fn the_process_wide_library_is_nccl_or_a_clear_error() {
        match nccl() {
            Ok(n) => assert!(n.version() >= MIN_VERSION),
            Err(e) => {
                assert!(matches!(e, Error::NcclUnavailable { .. }), "{e}");
                assert!(e.to_string().contains("install NCCL"), "{e}");
                // The failure is remembered, not retried.
                assert_eq!(nccl().expect_err("still missing"), e);
            }
        }
    }
}
