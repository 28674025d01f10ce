//! Finding and loading cuBLAS at run time, so that building needs nothing of it.

use std::ffi::{CStr, OsStr, OsString, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::sys::{self, Api};

/// The variable that names the cuBLAS library to load, as a path; when set (and not empty),
/// nothing else is tried.
pub const ENV_VAR: &str = "UM_CUBLAS_LIB";

/// What [`Cublas::load`] tries, in order, when [`ENV_VAR`] is not set: the dynamic loader's
/// own search (`LD_LIBRARY_PATH`, the loader cache, the system folders) for the soname of
/// CUDA 13's cuBLAS, then for the unversioned name, then the toolkit's folder.
pub const SEARCH: [&str; 2] = ["libcublas.so.13", "libcublas.so"];

/// The help every "not found" error ends with.
pub const INSTALL_HELP: &str = "install cuBLAS: the CUDA toolkit's (libcublas.so.13, in \
     /usr/local/cuda/lib64), or the `nvidia-cublas` Python wheel (`pip install nvidia-cublas`, \
     then put its `nvidia/cu13/lib` folder on LD_LIBRARY_PATH); or set UM_CUBLAS_LIB to the \
     library's full path";

/// A loaded cuBLAS: its entry points, where it was found, and its version.
///
/// Loaded once per process by [`Cublas::load`] and never unloaded: cuBLAS registers kernels
/// with every context it ran in, and unloading it while a context holds them is not worth the
/// memory it would give back. Every [`Blas`](crate::Blas) handle refers to it as
/// `&'static Cublas`.
#[derive(Debug)]
pub struct Cublas {
    api: Api,
    path: PathBuf,
    version: (i32, i32, i32),
    _library: libloading::Library,
}

/// The library `load` found, once it found one.
static LOADED: Mutex<Option<&'static Cublas>> = Mutex::new(None);

impl Cublas {
    /// The process's cuBLAS: loaded on the first call that succeeds, the same one after.
    ///
    /// Where it looks: the path in `UM_CUBLAS_LIB` if that is set (and nothing else); else
    /// `libcublas.so.13` and `libcublas.so` through the dynamic loader (`LD_LIBRARY_PATH`,
    /// `ldconfig`'s cache, the system folders), then `libcublas.so.13` in
    /// `$CUDA_PATH/lib64` and `/usr/local/cuda/lib64`. A library that loads but lacks an entry
    /// point `um-cublas` calls is passed over (and named in the error).
    ///
    /// Fails with [`Error::NotFound`], which names every candidate with the loader's reason
    /// and says what to install. A failure is not remembered: a later call looks again.
    ///
    /// The library found is trusted to be cuBLAS, as the dynamic loader trusts
    /// `LD_LIBRARY_PATH`: `UM_CUBLAS_LIB` is configuration of the same kind.
    pub fn load() -> Result<&'static Cublas> {
        // Loading runs the library's initialisers and asks its version: not inside um's stream
        // callback.
        um_core::refuse_inside_stream_callback("loading cuBLAS")?;
        let mut loaded = LOADED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lib) = *loaded {
            return Ok(lib);
        }
        let lib = search(std::env::var_os(ENV_VAR), std::env::var_os("CUDA_PATH"))?;
        *loaded = Some(lib);
        Ok(lib)
    }

    /// Loads the cuBLAS at `path`, and only there (not cached: each call loads it again, and
    /// keeps it loaded). For tests and for programs that ship their own copy.
    ///
    /// # Safety
    /// `path` names a cuBLAS library of CUDA 11 or later: loading it runs its initialisers, and
    /// `um-cublas` calls the functions it finds under cuBLAS's names with cuBLAS's prototypes.
    /// A library that merely has those names would be called with the wrong arguments.
    pub unsafe fn load_from(path: impl AsRef<Path>) -> Result<&'static Cublas> {
        let path = path.as_ref();
        // SAFETY: the caller's guarantee.
        unsafe { open(path.as_os_str()) }.map_err(|reason| Error::NotFound {
            tried: vec![format!("{}: {reason}", path.display())],
        })
    }

    /// The entry points, for calls `um-cublas` does not wrap. Every call through them is
    /// `unsafe`; [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md) says what such a call may do with `um`'s buffers and
    /// streams.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The address of the library's entry point `name` (`dlsym`), for a routine `um-cublas`
    /// does not wrap: cast it to the routine's prototype (`cublas_api.h`) and call it with the
    /// handle of [`Blas::raw_handle_on`](crate::Blas::raw_handle_on), whose example shows it.
    /// Getting the address is safe; calling it is a foreign call. The library is never
    /// unloaded, so the address stays valid for the life of the process.
    /// [`Error::NoSymbol`] where the library has no such entry point.
    pub fn symbol(&self, name: &CStr) -> Result<*const c_void> {
        // SAFETY: the symbol is read as an address only (`*const c_void`, whatever it points
        // to); nothing is called here, and the library stays loaded (see `Cublas`).
        let symbol = unsafe { self._library.get::<*const c_void>(name.to_bytes_with_nul()) };
        symbol.map(|s| *s).map_err(|e| Error::NoSymbol {
            name: name.to_string_lossy().into_owned(),
            reason: e.to_string(),
        })
    }

    /// Where the library was found: the name or path it was loaded by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// cuBLAS's version, `(major, minor, patch)` (`cublasGetProperty`), for example
    /// `(13, 1, 0)`.
    pub fn version(&self) -> (i32, i32, i32) {
        self.version
    }
}

/// Where [`Cublas::load`] looks (`um_core::LibrarySearch`, the order every library crate of um
/// shares).
const WHERE: um_core::LibrarySearch = um_core::LibrarySearch {
    env_var: ENV_VAR,
    names: &SEARCH,
};

/// Tries every candidate; the first that loads with every entry point wins.
fn search(env: Option<OsString>, cuda_path: Option<OsString>) -> Result<&'static Cublas> {
    WHERE
        .find_in(env, cuda_path, |name| {
            // SAFETY: the names are cuBLAS's own soname and file name, found where the dynamic
            // loader and the CUDA toolkit put cuBLAS, or the path the user configured in
            // UM_CUBLAS_LIB (trusted as LD_LIBRARY_PATH is; see `Cublas::load`).
            unsafe { open(name) }
        })
        .map_err(|tried| Error::NotFound { tried })
}

/// Loads `name` and resolves every entry point; leaks the library (see [`Cublas`]).
///
/// # Safety
/// `name` is a cuBLAS library (see [`Cublas::load_from`]).
unsafe fn open(name: &OsStr) -> std::result::Result<&'static Cublas, String> {
    // SAFETY: the caller's guarantee: the library is cuBLAS, whose initialisers are sound to
    // run on any thread at any time.
    let library = unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())?;
    // SAFETY: each symbol is looked up by its cuBLAS name and given its `cublas_api.h`
    // prototype (`sys.rs`); the library is never unloaded (it is leaked below with the
    // pointers), so the pointers stay valid for the life of the process.
    let api = unsafe { resolve(&library) }?;
    let mut version = [0 as c_int; 3];
    for (slot, kind) in version.iter_mut().zip(sys::PROPERTIES) {
        *slot = crate::result::property(&api, kind)
            .map_err(|status| format!("cublasGetProperty({kind}) returned status {status}"))?;
    }
    let cublas = Cublas {
        api,
        path: PathBuf::from(name),
        version: (version[0], version[1], version[2]),
        _library: library,
    };
    Ok(Box::leak(Box::new(cublas)))
}

/// # Safety
/// `library` is cuBLAS, and outlives every use of the pointers returned.
unsafe fn resolve(library: &libloading::Library) -> std::result::Result<Api, String> {
    macro_rules! symbol {
        ($name:literal) => {
            // SAFETY: the symbol is cuBLAS's, and the type its prototype (the caller's
            // guarantee and `sys.rs`); the pointer is copied out, valid while the library is
            // loaded.
            *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("no entry point {}: {e}", $name))?
        };
    }
    macro_rules! optional {
        ($name:literal) => {
            // SAFETY: as above.
            unsafe { library.get(concat!($name, "\0").as_bytes()) }
                .ok()
                .map(|s| *s)
        };
    }
    Ok(Api {
        create: symbol!("cublasCreate_v2"),
        destroy: symbol!("cublasDestroy_v2"),
        set_stream: symbol!("cublasSetStream_v2"),
        set_pointer_mode: symbol!("cublasSetPointerMode_v2"),
        get_property: symbol!("cublasGetProperty"),
        sgemm: symbol!("cublasSgemm_v2"),
        dgemm: symbol!("cublasDgemm_v2"),
        gemm_ex: symbol!("cublasGemmEx"),
        sgemv: symbol!("cublasSgemv_v2"),
        dgemv: symbol!("cublasDgemv_v2"),
        sgemm_strided_batched: symbol!("cublasSgemmStridedBatched"),
        dgemm_strided_batched: symbol!("cublasDgemmStridedBatched"),
        sdot: symbol!("cublasSdot_v2"),
        ddot: symbol!("cublasDdot_v2"),
        snrm2: symbol!("cublasSnrm2_v2"),
        dnrm2: symbol!("cublasDnrm2_v2"),
        sasum: symbol!("cublasSasum_v2"),
        dasum: symbol!("cublasDasum_v2"),
        isamax: symbol!("cublasIsamax_v2"),
        idamax: symbol!("cublasIdamax_v2"),
        saxpy: symbol!("cublasSaxpy_v2"),
        daxpy: symbol!("cublasDaxpy_v2"),
        sscal: symbol!("cublasSscal_v2"),
        dscal: symbol!("cublasDscal_v2"),
        scopy: symbol!("cublasScopy_v2"),
        dcopy: symbol!("cublasDcopy_v2"),
        sswap: symbol!("cublasSswap_v2"),
        dswap: symbol!("cublasDswap_v2"),
        status_name: optional!("cublasGetStatusName"),
        status_string: optional!("cublasGetStatusString"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_what_was_tried_and_what_to_install() {
        let err = search(Some("/nonexistent/libcublas.so.13".into()), None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("UM_CUBLAS_LIB=/nonexistent/libcublas.so.13"),
            "{err}"
        );
        assert!(err.contains("nvidia-cublas"), "{err}");
        assert!(err.contains("CUDA toolkit"), "{err}");
        // SAFETY: the path does not exist: nothing is loaded.
        let err = unsafe { Cublas::load_from("/nonexistent/libcublas.so.13") };
        assert!(matches!(err, Err(Error::NotFound { ref tried }) if tried.len() == 1));
    }
}
