//! `um-cublas`'s error type: what the checks before a call refuse, and what cuBLAS reports.

use crate::sys::Api;
use um_core::ErrorKind;

/// Why a matrix or vector does not fit the call: checked before cuBLAS runs, so a refused call
/// enqueues nothing and writes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// A dimension, leading dimension, increment or count is larger than cuBLAS's `int`
    /// (2^31 - 1), or a batch stride larger than its `long long` or so large that the batch's
    /// extent overflows.
    #[error(
        "{what} = {value} does not fit cuBLAS's int (at most 2147483647), or a stride's extent overflows"
    )]
    TooLarge {
        /// `m`, `n`, `k`, `lda`, `ldb`, `ldc`, `incx`, `incy`, `batch` or a stride.
        what: &'static str,
        /// The value given.
        value: usize,
    },
    /// A leading dimension smaller than the stored matrix's column (column-major) or row
    /// (row-major), or zero.
    #[error(
        "{what} = {ld} is too small: {matrix} is stored {rows}x{cols} {layout}, so {what} must be at least {min}"
    )]
    LeadingDimension {
        /// `lda`, `ldb` or `ldc`.
        what: &'static str,
        /// The matrix: `a`, `b` or `c`.
        matrix: &'static str,
        /// The leading dimension given (or implied).
        ld: usize,
        /// Rows of the matrix as stored.
        rows: usize,
        /// Columns of the matrix as stored.
        cols: usize,
        /// `column-major` or `row-major`.
        layout: &'static str,
        /// The least leading dimension allowed: `max(1, rows)` column-major, `max(1, cols)`
        /// row-major.
        min: usize,
    },
    /// A vector increment of 0 (`incx`, `incy`): um-cublas takes increments of at least 1.
    #[error("{what} = 0: an increment must be at least 1")]
    ZeroIncrement {
        /// `incx` or `incy`.
        what: &'static str,
    },
    /// The C matrices of a strided batch would overlap (`stride_c` less than C's extent, with
    /// more than one GEMM), and the GEMMs of a batch may run at once.
    #[error(
        "stride_c = {stride} is less than C's extent ({extent} elements): the outputs of the batch would overlap"
    )]
    OutputsOverlap {
        /// `stride_c`.
        stride: usize,
        /// The elements one C spans.
        extent: u64,
    },
    /// A buffer shorter than the matrix or vector it must hold: a `rows`×`cols` matrix with
    /// leading dimension `ld` spans `ld * (cols - 1) + rows` elements (column-major; swap rows
    /// and cols for row-major), a vector its length.
    #[error("buffer `{buffer}` has {len} elements, but {what} needs {needed}")]
    BufferTooShort {
        /// The buffer: `a`, `b`, `c`, `x` or `y`.
        buffer: &'static str,
        /// Its length.
        len: usize,
        /// Elements the call would touch.
        needed: u64,
        /// What it holds, for example `a 7x5 column-major matrix with lda = 9`.
        what: String,
    },
}

/// Everything `um-cublas` reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No cuBLAS could be loaded. Each entry of `tried` is a candidate and the dynamic loader's
    /// reason; the message ends with what to install.
    #[error("cuBLAS could not be loaded; tried {}. To fix: {}", .tried.join("; "), crate::library::INSTALL_HELP)]
    NotFound {
        /// `name: reason`, for every candidate, in the order tried.
        tried: Vec<String>,
    },
    /// The library has no entry point of this name ([`Cublas::symbol`](crate::Cublas::symbol)).
    #[error("cuBLAS has no entry point {name}: {reason}")]
    NoSymbol {
        /// The name asked for.
        name: String,
        /// The dynamic loader's reason.
        reason: String,
    },
    /// A matrix or vector does not fit the call (checked before cuBLAS runs).
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// The stream belongs to another context than the handle.
    #[error(
        "the stream belongs to another context (device) than the cuBLAS handle: make a `Blas` for that context"
    )]
    ContextMismatch,
    /// A buffer is owned by another stream of the same stream set than the one the call
    /// is enqueued on (the streams of a set share a brand, so this is checked at run time).
    #[error("buffer `{buffer}` is owned by another stream of the set than the call's")]
    StreamMismatch {
        /// The buffer: `a`, `b`, `c`, `x` or `y`.
        buffer: &'static str,
    },
    /// The handle was to move to another stream after a call whose record in the handle's
    /// [`StreamOrder`](um_core::StreamOrder) failed (`cuEventRecord` returned an error, which
    /// no run has seen), while a graph capture of `um` was in progress on its device or on this
    /// thread. Without the record, the move must wait for the whole context (the handle's
    /// workspace may still serve the old stream), and that wait would fail the capture.
    /// Also wherever `um` does not wait for the device then
    /// ([`Context::wait_idle_unless_capturing`](um_core::Context::wait_idle_unless_capturing)
    /// returns `Ok(false)`): while a capture of `um` waits to begin on the device (try again
    /// later), inside a driver callback, or 16 idle sections deep. Nothing was enqueued.
    /// A move after recorded calls (every other case) is ordered on the device and never
    /// returns this.
    #[error(
        "a cuBLAS handle whose last call could not be recorded cannot move to another stream where um may not wait for the device (a graph capture in progress or about to begin on its device or thread, a driver callback, or 16 nested idle sections)"
    )]
    CaptureInProgress,
    /// A cuBLAS call returned an error status.
    #[error("{call} failed: {name} ({description})")]
    Status {
        /// The entry point, for example `cublasSgemm_v2`.
        call: &'static str,
        /// The raw `cublasStatus_t`.
        code: i32,
        /// Its name, for example `CUBLAS_STATUS_INVALID_VALUE`.
        name: String,
        /// cuBLAS's description of it.
        description: String,
    },
    /// A driver call `um` made for the call failed (making the context current, say).
    #[error(transparent)]
    Um(#[from] um_core::Error),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The coarse kind of this error, as [`um_core::Error::kind`] gives it for um's own (a
    /// driver error keeps its kind): [`ErrorKind::LibraryMissing`] where the library could not
    /// be loaded, [`ErrorKind::WrongOwner`] for a buffer or stream the call may not use,
    /// [`ErrorKind::Invalid`] for what the checks before the call refuse,
    /// [`ErrorKind::Library`] for what the library itself reports.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::LibraryMissing,
            Error::Shape(_) => ErrorKind::Invalid,
            Error::ContextMismatch | Error::StreamMismatch { .. } => ErrorKind::WrongOwner,
            Error::CaptureInProgress => ErrorKind::NotHere,
            Error::NoSymbol { .. } | Error::Status { .. } => ErrorKind::Library,
            Error::Um(inner) => inner.kind(),
        }
    }
}

impl Error {
    /// `Ok` for `CUBLAS_STATUS_SUCCESS`, else [`Error::Status`] with the name and description
    /// cuBLAS gives (`cublasGetStatusName`/`String`, or this crate's table where the library
    /// lacks them).
    #[inline]
    pub(crate) fn status(api: &Api, call: &'static str, code: i32) -> Result<()> {
        if code == crate::sys::STATUS_SUCCESS {
            return Ok(());
        }
        Err(Error::failed(api, call, code))
    }

    /// The [`Error::Status`] of a call that returned `code` (not `CUBLAS_STATUS_SUCCESS`).
    #[cold]
    #[inline(never)]
    fn failed(api: &Api, call: &'static str, code: i32) -> Error {
        let (name, description) = crate::result::status_texts(api, code);
        let (known_name, known_text) = known(code);
        Error::Status {
            call,
            code,
            name: name.unwrap_or_else(|| known_name.to_owned()),
            description: description.unwrap_or_else(|| known_text.to_owned()),
        }
    }
}

/// The statuses `cublas_api.h` (CUDA 13) lists, for a library without `cublasGetStatusName`.
fn known(code: i32) -> (&'static str, &'static str) {
    match code {
        1 => (
            "CUBLAS_STATUS_NOT_INITIALIZED",
            "the library was not initialized",
        ),
        3 => (
            "CUBLAS_STATUS_ALLOC_FAILED",
            "the resource allocation failed",
        ),
        7 => (
            "CUBLAS_STATUS_INVALID_VALUE",
            "an invalid value was used as an argument",
        ),
        8 => (
            "CUBLAS_STATUS_ARCH_MISMATCH",
            "an absent device architectural feature is required",
        ),
        11 => (
            "CUBLAS_STATUS_MAPPING_ERROR",
            "an access to GPU memory space failed",
        ),
        13 => (
            "CUBLAS_STATUS_EXECUTION_FAILED",
            "the GPU program failed to execute",
        ),
        14 => (
            "CUBLAS_STATUS_INTERNAL_ERROR",
            "an internal operation failed",
        ),
        15 => (
            "CUBLAS_STATUS_NOT_SUPPORTED",
            "the feature requested is not supported",
        ),
        16 => (
            "CUBLAS_STATUS_LICENSE_ERROR",
            "error detected trying to check the license",
        ),
        _ => (
            "CUBLAS_STATUS_UNKNOWN",
            "a status this version of um-cublas does not know",
        ),
    }
}

/// Inside `um`'s stream closures (whose result is `um_core::Result`), `?` on a `um-cublas`
/// result converts here: a driver error stays itself, a library that could not be loaded
/// becomes [`um_core::Error::LibraryNotFound`], everything else [`um_core::Error::Library`],
/// each with this error's message (so [`um_core::Error::kind`] still tells a missing library
/// from a refused call).
impl From<Error> for um_core::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Um(inner) => inner,
            missing @ Error::NotFound { .. } => um_core::Error::LibraryNotFound {
                library: "um-cublas",
                message: missing.to_string(),
            },
            other => um_core::Error::Library {
                library: "um-cublas",
                message: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Error, ShapeError};
    use um_core::ErrorKind;

    /// A missing cuBLAS stays a missing library through `?` into um's error, and a refused call
    /// stays a refusal: `kind` tells them apart on both sides of the conversion.
    #[test]
    fn a_missing_library_keeps_its_kind_through_the_conversion() {
        let missing = Error::NotFound {
            tried: vec!["libcublas.so.13: not found".into()],
        };
        assert_eq!(missing.kind(), ErrorKind::LibraryMissing);
        let text = missing.to_string();
        let um: um_core::Error = missing.into();
        assert_eq!(um.kind(), ErrorKind::LibraryMissing);
        assert_eq!(um.to_string(), format!("um-cublas: {text}"));
        let short = Error::Shape(ShapeError::TooLarge {
            what: "m",
            value: usize::MAX,
        });
        assert_eq!(short.kind(), ErrorKind::Invalid);
        let um: um_core::Error = short.into();
        assert!(matches!(
            um,
            um_core::Error::Library {
                library: "um-cublas",
                ..
            }
        ));
        assert_eq!(um.kind(), ErrorKind::Library);
        let driver = Error::Um(um_core::Error::StreamPoisoned);
        assert_eq!(driver.kind(), ErrorKind::Poisoned);
    }
}
