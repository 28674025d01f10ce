//! Finding and loading cuSPARSE at run time, so that building needs nothing of it.

use std::ffi::{CStr, OsStr, OsString, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::sys::{self, Api};

/// The variable that names the cuSPARSE library to load, as a path; when set (and not empty),
/// nothing else is tried.
pub const ENV_VAR: &str = "UM_CUSPARSE_LIB";

/// What [`Cusparse::load`] tries, in order, when [`ENV_VAR`] is not set: the dynamic loader's
/// own search (`LD_LIBRARY_PATH`, the loader cache, the system folders) for the soname of
/// cuSPARSE 12 (CUDA 12 and 13), then for the unversioned name, then the toolkit's folder.
pub const SEARCH: [&str; 2] = ["libcusparse.so.12", "libcusparse.so"];

/// The help every "not found" error ends with.
pub const INSTALL_HELP: &str = "install cuSPARSE: the CUDA toolkit's (libcusparse.so.12, in \
     /usr/local/cuda/lib64), or the `nvidia-cusparse` Python wheel (`pip install nvidia-cusparse`, \
     then put its `nvidia/cu13/lib` folder on LD_LIBRARY_PATH); or set UM_CUSPARSE_LIB to the \
     library's full path";

/// A loaded cuSPARSE: its entry points, where it was found, and its version.
///
/// Loaded once per process by [`Cusparse::load`] and never unloaded (as cuBLAS in `um-cublas`:
/// the library registers kernels with every context it ran in). Every [`Sparse`](crate::Sparse)
/// refers to it as `&'static Cusparse`.
#[derive(Debug)]
pub struct Cusparse {
    api: Api,
    path: PathBuf,
    version: (i32, i32, i32),
    _library: libloading::Library,
}

/// The library `load` found, once it found one.
static LOADED: Mutex<Option<&'static Cusparse>> = Mutex::new(None);

impl Cusparse {
    /// The process's cuSPARSE: loaded on the first call that succeeds, the same one after.
    ///
    /// Where it looks: the path in `UM_CUSPARSE_LIB` if that is set (and nothing else); else
    /// `libcusparse.so.12` and `libcusparse.so` through the dynamic loader, then
    /// `libcusparse.so.12` in `$CUDA_PATH/lib64` and `/usr/local/cuda/lib64`. A library that
    /// loads but lacks an entry point `um-cusparse` calls is passed over (and named in the
    /// error).
    ///
    /// Fails with [`Error::NotFound`], which names every candidate with the loader's reason
    /// and says what to install. A failure is not remembered: a later call looks again.
    ///
    /// The library found is trusted to be cuSPARSE, as the dynamic loader trusts
    /// `LD_LIBRARY_PATH`: `UM_CUSPARSE_LIB` is configuration of the same kind.
    pub fn load() -> Result<&'static Cusparse> {
        // Loading runs the library's initialisers: not inside um's stream callback.
        um_core::refuse_inside_stream_callback("loading cuSPARSE")?;
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

    /// Loads the cuSPARSE at `path`, and only there (not cached: each call loads it again, and
    /// keeps it loaded). For tests and for programs that ship their own copy.
    ///
    /// # Safety
    /// `path` names a cuSPARSE library of CUDA 12 or later: loading it runs its initialisers, and
    /// `um-cusparse` calls the functions it finds under cuSPARSE's names with cuSPARSE's prototypes.
    /// A library that merely has those names would be called with the wrong arguments.
    pub unsafe fn load_from(path: impl AsRef<Path>) -> Result<&'static Cusparse> {
        let path = path.as_ref();
        // SAFETY: the caller's guarantee.
        unsafe { open(path.as_os_str()) }.map_err(|reason| Error::NotFound {
            tried: vec![format!("{}: {reason}", path.display())],
        })
    }

    /// The entry points, for calls `um-cusparse` does not wrap. Every call through them is
    /// `unsafe`; [`docs/interop.md`](https://github.com/um-rs/um/blob/main/docs/interop.md)
    /// says what such a call may do with `um`'s buffers and streams.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The address of the entry point `name` (for example a routine `um-cusparse` does not wrap), to
    /// be cast to its C prototype and called with the handle of [`Sparse::as_raw`](crate::Sparse::as_raw). Getting the address is
    /// safe; calling it is a foreign call. The library is never unloaded, so the address stays
    /// valid for the life of the process. [`Error::NoSymbol`] where the library has no such
    /// entry point.
    pub fn symbol(&self, name: &CStr) -> Result<*const c_void> {
        // SAFETY: the symbol is read as an address only (`*const c_void`, whatever it points
        // to); nothing is called here, and the library stays loaded (see `Cusparse`).
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

    /// cuSPARSE's version, `(major, minor, patch)` (`cusparseGetProperty`), for example
    /// `(12, 6, 3)` (CUDA 13.0).
    pub fn version(&self) -> (i32, i32, i32) {
        self.version
    }
}

/// Where [`Cusparse::load`] looks (`um_core::LibrarySearch`, the order every library crate of
/// um shares).
const WHERE: um_core::LibrarySearch = um_core::LibrarySearch {
    env_var: ENV_VAR,
    names: &SEARCH,
};

/// Tries every candidate; the first that loads with every entry point wins.
fn search(env: Option<OsString>, cuda_path: Option<OsString>) -> Result<&'static Cusparse> {
    WHERE
        .find_in(env, cuda_path, |name| {
            // SAFETY: the names are cuSPARSE's own soname and file name, found where the dynamic
            // loader and the CUDA toolkit put it, or the path the user configured in
            // UM_CUSPARSE_LIB (trusted as LD_LIBRARY_PATH is; see `Cusparse::load`).
            unsafe { open(name) }
        })
        .map_err(|tried| Error::NotFound { tried })
}

/// Loads `name` and resolves every entry point; leaks the library (see [`Cusparse`]).
///
/// # Safety
/// `name` is a cuSPARSE library (see [`Cusparse::load_from`]).
unsafe fn open(name: &OsStr) -> std::result::Result<&'static Cusparse, String> {
    // SAFETY: the caller's guarantee: the library is cuSPARSE, whose initialisers are sound to
    // run on any thread at any time.
    let library = unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())?;
    // SAFETY: each symbol is looked up by its cuSPARSE name and given its `cusparse.h` prototype
    // (`sys.rs`); the library is never unloaded (it is leaked below with the pointers), so the
    // pointers stay valid for the life of the process.
    let api = unsafe { resolve(&library) }?;
    let mut version = [0 as c_int; 3];
    for (slot, kind) in version.iter_mut().zip(sys::PROPERTIES) {
        *slot = crate::result::property(&api, kind)
            .map_err(|status| format!("cusparseGetProperty({kind}) returned status {status}"))?;
    }
    let cusparse = Cusparse {
        api,
        path: PathBuf::from(name),
        version: (version[0], version[1], version[2]),
        _library: library,
    };
    Ok(Box::leak(Box::new(cusparse)))
}

/// # Safety
/// `library` is cuSPARSE, and outlives every use of the pointers returned.
unsafe fn resolve(library: &libloading::Library) -> std::result::Result<Api, String> {
    macro_rules! symbol {
        ($name:literal) => {
            // SAFETY: the symbol is cuSPARSE's, and the type its prototype (the caller's
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
        create: symbol!("cusparseCreate"),
        destroy: symbol!("cusparseDestroy"),
        set_stream: symbol!("cusparseSetStream"),
        get_property: symbol!("cusparseGetProperty"),
        create_csr: symbol!("cusparseCreateCsr"),
        destroy_sp_mat: symbol!("cusparseDestroySpMat"),
        create_dn_vec: symbol!("cusparseCreateDnVec"),
        destroy_dn_vec: symbol!("cusparseDestroyDnVec"),
        create_dn_mat: symbol!("cusparseCreateDnMat"),
        destroy_dn_mat: symbol!("cusparseDestroyDnMat"),
        spmv_buffer_size: symbol!("cusparseSpMV_bufferSize"),
        spmv: symbol!("cusparseSpMV"),
        spmm_buffer_size: symbol!("cusparseSpMM_bufferSize"),
        spmm: symbol!("cusparseSpMM"),
        status_name: optional!("cusparseGetErrorName"),
        status_string: optional!("cusparseGetErrorString"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_what_was_tried_and_what_to_install() {
        let err = search(Some("/nonexistent/libcusparse.so.12".into()), None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("UM_CUSPARSE_LIB=/nonexistent/libcusparse.so.12"),
            "{err}"
        );
        assert!(err.contains("nvidia-cusparse"), "{err}");
        assert!(err.contains("CUDA toolkit"), "{err}");
        // SAFETY: the path does not exist: nothing is loaded.
        let err = unsafe { Cusparse::load_from("/nonexistent/libcusparse.so.12") };
        assert!(matches!(err, Err(Error::NotFound { ref tried }) if tried.len() == 1));
    }
}
